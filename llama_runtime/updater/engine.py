"""The composition root: the one place that assembles the engine.

The CLI and :class:`~updater.api.service.RuntimeUpdater` both build their
collaborators here, from one :class:`~updater.config.Settings` (flag >
environment > default) and one :class:`Seams` (what tests and embedding apps
may replace). So a setting that works for one works for the other, the GitHub
client is built in one place, and every collaborator is built on first use:
importing this module costs nothing of httpx, the installer or process control.

::

    settings = resolve_settings(home=..., api_url=...)
    engine = Engine(settings, Seams(host=my_probe))
    source = engine.open_source()                 # a BuildSource; the caller closes it
        installer = engine.installer(source)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.layout import Home
from llama_runtime.updater.net.origin import is_oci_url

if TYPE_CHECKING:
    import ssl

    from llama_runtime.runtime.binary import ProcessRunner
    from llama_runtime.runtime.server import ServerControl
    from llama_runtime.updater.activate.installer import Installer
    from llama_runtime.updater.choice.host import HostFacts
    from llama_runtime.updater.config import GatePolicy, Settings
    from llama_runtime.updater.sources.oci.client import RegistryClient
    from llama_runtime.updater.sources.source import BuildSource
    from llama_runtime.updater.stage.streaming import FetchOptions

__all__ = ["Engine", "Seams"]

#: Connect timeout of a request (seconds): a dead host should fail fast.
CONNECT_TIMEOUT_SECONDS: Final[float] = 10.0
#: Name of the ETag cache in ``<home>/cache`` (conditional requests cost no quota).
ETAG_CACHE_NAME: Final = "etags.json"
#: Name of the registry token cache in ``<home>/cache`` (a repeated check is one request).
TOKEN_CACHE_NAME: Final = "registry-tokens.json"


@dataclass(frozen=True)
class Seams:
    """What tests and embedding apps may replace; ``None`` means the real part.

    Attributes:
        source_factory: Builds the build source every verb asks (any
            :class:`~updater.sources.source.BuildSource`: an app's own, a test's).
        host: Returns the host facts (default: detect this machine once).
        runner: Runs a staged binary to verify it.
        server: The llama-server to switch around an activation (default: the
            server ``llama-runtime server start`` manages in the home).
        clock: Wall and monotonic time (job records and rates, the rate-limit backoff).
    """

    source_factory: Callable[[], BuildSource] | None = None
    host: Callable[[], HostFacts] | None = None
    runner: ProcessRunner | None = None
    server: ServerControl | None = None
    clock: Clock = SYSTEM_CLOCK


class Engine:
    """Builds the updater's collaborators from settings and seams.

    Args:
        settings: The merged settings.
        seams: Replacements for tests and apps.
    """

    def __init__(self, settings: Settings, seams: Seams | None = None) -> None:
        self.settings = settings
        self.seams = seams or Seams()
        self.home = Home(settings.home)
        self._host: HostFacts | None = None

    def open_source(self, *, etag_cache: bool = True, api_deadline: bool = True) -> BuildSource:
        """The build source for the configured API URL and repository (or the seams'); the caller closes it.

        A ``file://`` URL is a mirror directory read through a file transport;
        anything else is the GitHub REST API (or a static mirror) over HTTP.

        Args:
            etag_cache: Keep ETags in the home so repeated questions are free 304s
                (``plan`` and ``mirror sync`` leave the home alone).
            api_deadline: Bound all API requests by ``settings.api_deadline`` together
                (``mirror sync`` pages every release and attestation: each request keeps its own bounds).
        """
        if self.seams.source_factory is not None:
            return self.seams.source_factory()
        self._describe_runtime()
        import httpx

        from llama_runtime.updater.sources.github import GitHubClient, JsonFileEtagCache

        cache = None
        if etag_cache:
            self.home.ensure()
            cache = JsonFileEtagCache(self.home.cache_dir / ETAG_CACHE_NAME)
        read = self.settings.read_timeout
        api_url, transport = self.settings.api_url, None
        if is_oci_url(api_url):
            # An OCI registry filled by ``mirror sync --dest oci://…``.
            from llama_runtime.updater.sources.oci.source import open_registry_source

            registry = self._registry_client(api_url, api_deadline=api_deadline, tokens=etag_cache)
            return open_registry_source(registry, self.settings.repo, etag_cache=cache)
        if api_url.startswith("file://"):
            # A mirror directory (``llama-runtime mirror sync``), read without a server.
            from llama_runtime.updater.sources.mirror_reader import FileTransport, file_api_url

            api_url, root = file_api_url(api_url)
            transport = FileTransport(root)
        return GitHubClient(
            api_url,
            self.settings.repo,
            token=self.settings.token,
            transport=transport,
            etag_cache=cache,
            timeout=httpx.Timeout(read, connect=min(CONNECT_TIMEOUT_SECONDS, read)),
            api_deadline=self.settings.api_deadline if api_deadline else None,
            verify=self.tls() if transport is None else True,
        )

    def _describe_runtime(self) -> None:
        """Name the active runtime (build, backend) in the User-Agent's detail; nothing when none is readable."""
        from llama_runtime.runtime.errors import LlamaRuntimeError
        from llama_runtime.updater.net.identity import describe_runtime

        build = backend = None
        try:
            pointer = self.home.read_pointer() if self.home.root.is_dir() else None
            if pointer is not None and pointer.active:
                marker = self.home.load(pointer.active).marker
                build, backend = marker.tag, marker.backend
        except (LlamaRuntimeError, OSError, ValueError):
            pass  # a damaged home names no runtime; the request goes out all the same
        describe_runtime(build=build, backend=backend)

    @contextlib.contextmanager
    def open_registry(self, url: str) -> Iterator[RegistryClient]:
        """A client of the registry repository ``url`` (a push's destination), closed on exit.

        The settings' read timeout and CA bundle are the ones a registry source gets; every request
        keeps its own bounds (a push pages every build), and the home is left alone (no token cache),
        as ``mirror sync`` does.
        """
        self._describe_runtime()
        client = self._registry_client(url, api_deadline=False, tokens=False)
        try:
            yield client
        finally:
            client.http.close()

    def _registry_client(self, url: str, *, api_deadline: bool, tokens: bool) -> RegistryClient:
        from llama_runtime.updater.sources.oci.auth import JsonFileTokenCache
        from llama_runtime.updater.sources.oci.connect import registry_client

        cache = None
        if tokens:
            self.home.ensure()
            cache = JsonFileTokenCache(self.home.cache_dir / TOKEN_CACHE_NAME, self.seams.clock)
        return registry_client(
            url,
            read_timeout=self.settings.read_timeout,
            ca_bundle=self.settings.ca_bundle,
            deadline=self.settings.api_deadline if api_deadline else None,
            clock=self.seams.clock,
            tokens=cache,
        )

    def tls(self) -> ssl.SSLContext | bool:
        """What HTTPS connections trust: ``--ca-bundle``, OpenSSL's variables, else the OS store and certifi."""
        from llama_runtime.updater.net.tls import ssl_context

        return ssl_context(ca_bundle=self.settings.ca_bundle)

    def host(self) -> HostFacts:
        """Host facts, detected once per engine."""
        if self._host is None:
            if self.seams.host is not None:
                self._host = self.seams.host()
            else:
                from llama_runtime.updater.choice.host_detect import detect_host

                self._host = detect_host()
        return self._host

    def server(self) -> ServerControl:
        """The app's own server, or the one ``llama-runtime server start`` manages in this home."""
        if self.seams.server is not None:
            return self.seams.server
        from llama_runtime.runtime.server import ManagedServer

        return ManagedServer(self.home.server_dir)

    def installer(self, source: BuildSource | None = None) -> Installer:
        """The install transaction over this home (``source`` for updates, none for local work)."""
        from llama_runtime.runtime.binary import run_process
        from llama_runtime.runtime.clock import utc_iso
        from llama_runtime.runtime.sandbox import sandbox_for
        from llama_runtime.updater.activate.installer import Installer
        from llama_runtime.updater.activate.pipeline import StoragePolicy
        from llama_runtime.updater.verify.provenance import ProvenanceCheck

        # No source (install-file, use) or a file:// mirror: an offline machine, no trust-root refresh.
        # A registry is the fleet's offline copy too: nothing is asked of the internet.
        offline = source is None or self.settings.api_url.startswith("file://") or is_oci_url(self.settings.api_url)
        return Installer(
            self.home,
            source=source,
            host=self.host,
            runner=self.seams.runner or run_process,
            clock=lambda: utc_iso(self.seams.clock.time()),  # the one clock also stamps installs
            server=self.server(),
            health_timeout=self.settings.health_timeout,
            gate=self.gate_policy(),
            provenance=ProvenanceCheck.from_settings(
                self.settings.provenance, require=self.settings.require_provenance, offline=offline
            ),
            fetch_options=self.fetch_options(),
            storage=StoragePolicy(keep=self.settings.keep, fresh_companion=self.settings.fresh_companion),
            sandbox=sandbox_for(self.home.root, self.settings.sandbox),
            compute_check=self.settings.compute_check,
        )

    def fetch_options(self) -> FetchOptions:
        """How every download of this invocation is fetched: its parallel ranges and its pace."""
        from llama_runtime.updater.stage.streaming import FetchOptions

        return FetchOptions(parallel=self.settings.parallel_downloads, pace=self.settings.pace)

    def gate_policy(self) -> GatePolicy:
        """The inference gate's policy: the settings' own, else what the home stores (``gate.json``)."""
        if self.settings.gate is not None:
            return self.settings.gate
        from llama_runtime.updater.verify.gate import load_gate_settings

        return load_gate_settings(self.home.root)
