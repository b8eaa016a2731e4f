"""Settings of one llama-runtime invocation: flag > environment > default.

The CLI's flags and :class:`~updater.api.service.RuntimeUpdater`'s arguments
are both "flags" here: one :func:`resolve_settings` merges them with the
environment, and :class:`~updater.engine.Engine` builds everything from the
result. Also the limits that protect the machine from a hostile or broken release;
each carries its unit and why it has the value it has.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.fsutil import decimal
from llama_runtime.runtime.marker import parse_backend
from llama_runtime.updater.net.origin import is_oci_url

if TYPE_CHECKING:
    from llama_runtime.updater.release.channel import Channel

DEFAULT_API_URL: Final = "https://api.github.com"
DEFAULT_REPO: Final = "ggml-org/llama.cpp"

#: The largest llama.cpp asset so far is a Windows CUDA zip of ~250 MB and the
#: cudart companion ~390 MB; 2 GiB leaves room for growth while stopping an
#: endless body long before it fills a disk.
MAX_ASSET_BYTES: Final = 2 * 1024**3
#: Extracted runtimes are at most ~4x their compressed size (shared libraries
#: compress ~3:1); used to estimate the disk space needed before downloading.
EXTRACTED_SIZE_FACTOR: Final = 4

#: How long a restarted llama-server has to answer ``/health`` after a switch
#: (seconds). A router-mode server is healthy in well under a second; a server
#: that loads a model named on its command line may need to map several GB first.
SERVER_READY_TIMEOUT_SECONDS: Final[float] = 120.0
#: Read timeout of one GitHub or download request (seconds, every phase but
#: connect): GitHub can be slow to render a long release list.
READ_TIMEOUT_SECONDS: Final[float] = 30.0
#: Longest all API requests of one command may take together (seconds), retries, backoff and
#: slow answers included: ``check`` from a scheduled job or an app's button must end in
#: bounded time, and GitHub answers each request in well under a second when it is well.
API_DEADLINE_SECONDS: Final[float] = 30.0
#: Concurrent ranges for one large download (``LLAMA_RUNTIME_PARALLEL_DOWNLOADS``):
#: slow CDNs cap each connection, so four give a near-4x speed-up; 1 disables ranges.
DEFAULT_PARALLEL_DOWNLOADS: Final = 4
#: More connections only add load on the host; 16 is far past where a capped CDN stops scaling.
MAX_PARALLEL_DOWNLOADS: Final = 16
#: llama-server's own default port (``--port``, tools/server/README.md), so that a
#: managed server is where every llama.cpp client looks first.
LLAMA_SERVER_DEFAULT_PORT: Final[int] = 8080
#: Seconds a managed server's start waits for /health (``LLAMA_RUNTIME_SERVER_WAIT``). A server
#: that maps a large model from a slow disk, or a Vulkan build compiling its shader cache cold (47 s
#: seen on a desktop GPU), is loading, not failing; one that exits is reported at once anyway.
SERVER_WAIT_DEFAULT_SECONDS: Final[float] = 300.0
PARALLEL_DOWNLOADS_ENV: Final = "LLAMA_RUNTIME_PARALLEL_DOWNLOADS"
#: Runtimes each successful update keeps (``--keep``/``LLAMA_RUNTIME_KEEP``): the
#: active, the previous (the rollback target) and the newest other build; 0 keeps every runtime.
DEFAULT_RETAIN: Final = 3
RETAIN_ENV: Final = "LLAMA_RUNTIME_KEEP"

_T = TypeVar("_T")

#: Below 1 KiB/s a 100 MB asset would take more than a day: the link is
#: stalled, not slow (curl's --speed-limit idea; its users pick similar values).
MIN_RATE_BYTES_PER_SECOND: Final[float] = 1024.0
#: The rate is averaged over a minute, so a short stall (a Wi-Fi roam, a CDN
#: hiccup) never ends a healthy download.
MIN_RATE_WINDOW_SECONDS: Final[float] = 60.0
#: One asset may take at most 6 hours over all attempts: the largest asset
#: (~400 MB) still fits at ~20 KB/s, and a server that drips just above the
#: minimum rate cannot hold the update lock for days.
DOWNLOAD_DEADLINE_SECONDS: Final[float] = 6 * 3600.0

_REPO = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class DownloadPace:
    """The limits one download is held to: a download that drips is a failed download.

    Attributes:
        min_rate: Bytes per second a download must average over ``window`` (0: no minimum).
        window: Seconds the rate is averaged over.
        deadline: Seconds one asset may take over all its attempts.
    """

    min_rate: float = MIN_RATE_BYTES_PER_SECOND
    window: float = MIN_RATE_WINDOW_SECONDS
    deadline: float = DOWNLOAD_DEADLINE_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DownloadPace:
        """The limits with ``env``'s overrides.

        Raises:
            UserInputError: A value is not a positive number (``LLAMA_RUNTIME_MIN_RATE`` may be 0: off).
        """
        return cls(
            min_rate=env_number(
                env, "LLAMA_RUNTIME_MIN_RATE", MIN_RATE_BYTES_PER_SECOND, unit="bytes per second", zero_ok=True
            ),
            window=env_number(env, "LLAMA_RUNTIME_MIN_RATE_WINDOW", MIN_RATE_WINDOW_SECONDS),
            deadline=env_number(env, "LLAMA_RUNTIME_DOWNLOAD_DEADLINE", DOWNLOAD_DEADLINE_SECONDS),
        )


@dataclass(frozen=True)
class ProvenanceSettings:
    """The provenance check's opt-ins from the environment, parsed (plain data; ``verify`` builds the check).

    Attributes:
        trusted_root: A Sigstore ``trusted_root.json`` to use instead of the production one
            (``LLAMA_RUNTIME_TRUSTED_ROOT``).
        offline: Never refresh the trust root over the network (``LLAMA_RUNTIME_TRUST_ROOT_OFFLINE``).
        workflow: The deprecated bare ``LLAMA_RUNTIME_PROVENANCE_WORKFLOW`` pin (every fork).
        workflows: Per-repository pins, casefolded ``owner/name`` -> the signing workflow's path
            (``LLAMA_RUNTIME_PROVENANCE_WORKFLOW``).
        signers: Reusable workflows, casefolded ``owner/name`` -> ``o/n/.github/workflows/x.yml``
            (``LLAMA_RUNTIME_PROVENANCE_SIGNER``).
    """

    trusted_root: Path | None = None
    offline: bool = False
    workflow: str | None = None
    workflows: Mapping[str, str] = field(default_factory=dict)
    signers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProvenanceSettings:
        """The opt-ins ``env`` names.

        Raises:
            UserInputError: A value is not of its documented form (exit 2), naming the variable.
        """
        root = env.get("LLAMA_RUNTIME_TRUSTED_ROOT", "").strip()
        if root and not Path(root).expanduser().is_file():
            # Checked here, not when a verification first needs it: a typo never waits for a download.
            raise UserInputError(
                f"LLAMA_RUNTIME_TRUSTED_ROOT={root[:200]} is not a file; give the path of a Sigstore "
                "trusted_root.json, or unset it to use Sigstore's production trust root."
            )
        bare, workflows = parse_workflows(env.get("LLAMA_RUNTIME_PROVENANCE_WORKFLOW", ""))
        return cls(
            trusted_root=Path(root).expanduser() if root else None,
            offline=env_flag(env, "LLAMA_RUNTIME_TRUST_ROOT_OFFLINE"),
            workflow=bare,
            workflows=workflows,
            signers=parse_signers(env.get("LLAMA_RUNTIME_PROVENANCE_SIGNER", "")),
        )


# -- the inference gate's policy: how a switch is judged (verify.gate carries it out). ---------------------------

#: Below this drop two runs of the same build differ by noise alone: on a real
#: model on a GPU repeated 16-token timings vary by a few percent; 20 % is a
#: change a user notices (and a regression reported upstream is usually 30 %+).
DEFAULT_MAX_SLOWDOWN: Final = 0.20
#: Timed requests per measurement: five medians out one slow or lucky request, and cost
#: ~0.1 s on the tiny model (16 tokens each at ~700 tokens/s on a CPU).
GATE_SAMPLES: Final = 5
OnSlowdown = Literal["warn", "rollback"]


@dataclass(frozen=True)
class GatePolicy:
    """How a switch is judged.

    Attributes:
        enabled: Run the completion request after a switch with a loaded model.
        timeout: Seconds one check has in all (its samples included); None: scaled to the
            model and device (:func:`check_limits`).
        samples: Timed requests per measurement, after the check's own request (the medians count).
        max_slowdown: Largest tolerated drop of tokens/s (0.2 = 20 %); None: never compare.
        on_slowdown: What a larger drop does.
        smoke_model: A small GGUF the staged build must run before activation.
        smoke_args: The user's server arguments for the smoke run (device, ``-ngl``, threads, context).
    """

    enabled: bool = True
    timeout: float | None = None
    samples: int = GATE_SAMPLES
    max_slowdown: float | None = DEFAULT_MAX_SLOWDOWN
    on_slowdown: OnSlowdown = "warn"
    smoke_model: Path | None = None
    smoke_args: tuple[str, ...] = ()

    def with_slowdown(self, max_slowdown: float | None, on_slowdown: OnSlowdown) -> GatePolicy:
        """A copy with another slowdown rule."""
        return dataclasses.replace(self, max_slowdown=max_slowdown, on_slowdown=on_slowdown)


@dataclass(frozen=True)
class Settings:
    """Where the runtime lives, where releases come from, and how long to wait.

    Attributes:
        home: The llama-runtime home (``--home`` / ``LLAMA_RUNTIME_HOME``).
        api_url: GitHub REST API base (``--api-url`` / ``LLAMA_RUNTIME_GITHUB_API``).
        repo: ``owner/name`` (``--repo`` / ``LLAMA_RUNTIME_REPO``; else the active
            runtime's, so ``update`` and ``check`` stay on the fork it came from).
        backend: Backend request (``--backend`` / ``LLAMA_RUNTIME_BACKEND``), ``auto`` if none.
        token: The token the contract allows for the API origin (updater.credentials).
        backend_explicit: The backend was given (flag or environment), not defaulted.
        read_timeout: Seconds one request may stall (``LLAMA_RUNTIME_READ_TIMEOUT``).
        health_timeout: Seconds a restarted server has to come up (``LLAMA_RUNTIME_HEALTH_TIMEOUT``).
        api_deadline: Seconds all API requests of one command may take together
            (``LLAMA_RUNTIME_API_DEADLINE``).
        gate: The inference gate's policy for this invocation; None: the home's stored
            one (``<home>/gate.json``), else the default.
        require_provenance: Refuse assets without a verified build attestation
            (``--require-provenance`` / ``LLAMA_RUNTIME_REQUIRE_PROVENANCE=1``).
        parallel_downloads: Concurrent ranges of one large download (``LLAMA_RUNTIME_PARALLEL_DOWNLOADS``).
        keep: Runtimes each successful update keeps (``--keep`` / ``LLAMA_RUNTIME_KEEP``; 0 keeps all).
        fresh_companion: Download a CUDA companion even when an installed runtime's
            verified copy of it could be reused (``--fresh-companion``).
        repo_explicit: The repository was given (flag or environment), not followed or defaulted.
        pace: The limits every download is held to (``LLAMA_RUNTIME_MIN_RATE``,
            ``LLAMA_RUNTIME_MIN_RATE_WINDOW``, ``LLAMA_RUNTIME_DOWNLOAD_DEADLINE``).
        provenance: The provenance check's opt-ins (``LLAMA_RUNTIME_TRUSTED_ROOT``,
            ``LLAMA_RUNTIME_TRUST_ROOT_OFFLINE``, ``LLAMA_RUNTIME_PROVENANCE_WORKFLOW``,
            ``LLAMA_RUNTIME_PROVENANCE_SIGNER``).
        ca_bundle: A PEM file of the CAs HTTPS servers are trusted by (``--ca-bundle`` /
            ``LLAMA_RUNTIME_CA_BUNDLE``); ``None``: OpenSSL's variables, else the OS store and certifi.
        server_port: The port the managed llama-server binds when its arguments name none
            (``LLAMA_RUNTIME_SERVER_PORT``, else llama-server's own 8080; ``None``: any free port).
        server_wait: Seconds a managed server's start waits for ``/health`` (``LLAMA_RUNTIME_SERVER_WAIT``).
        follow_exact: Follow the channel down as well as up (``--follow exact`` /
            ``LLAMA_RUNTIME_FOLLOW=exact``); default ``newer``: never a downgrade without a tag.
        sandbox: ``auto`` runs builds not yet accepted in the strongest sandbox this host offers;
            ``require`` refuses a host with none (``LLAMA_RUNTIME_SANDBOX``).
        compute_check: Run the shipped model on the build's device on every switch
            (``--no-compute-check``: False, recorded in the marker).
    """

    home: Path
    api_url: str
    repo: str
    backend: str
    token: str | None
    backend_explicit: bool = False
    read_timeout: float = READ_TIMEOUT_SECONDS
    health_timeout: float = SERVER_READY_TIMEOUT_SECONDS
    api_deadline: float = API_DEADLINE_SECONDS
    gate: GatePolicy | None = None
    require_provenance: bool = False
    channel: str | None = None  # a Channel; None: keep the active runtime's stored channel (else stable)
    parallel_downloads: int = DEFAULT_PARALLEL_DOWNLOADS
    keep: int = DEFAULT_RETAIN
    fresh_companion: bool = False
    repo_explicit: bool = False
    pace: DownloadPace = DownloadPace()
    provenance: ProvenanceSettings = ProvenanceSettings()
    ca_bundle: str | None = None
    sandbox: Literal["auto", "require"] = "auto"  # runtime.sandbox.SandboxMode
    compute_check: bool = True
    server_port: int | None = LLAMA_SERVER_DEFAULT_PORT
    server_wait: float = SERVER_WAIT_DEFAULT_SECONDS

    follow_exact: bool = False

    @classmethod
    def resolve(
        cls,
        *,
        home: str | Path | None = None,
        api_url: str | None = None,
        repo: str | None = None,
        backend: str | None = None,
        token: str | None = None,
        require_provenance: bool = False,
        env: Mapping[str, str] | None = None,
        channel: str | None = None,
        follow_active_repo: bool = True,
        keep: str | None = None,
        fresh_companion: bool = False,
        verifies: bool = True,
        ca_bundle: str | None = None,
        follow: str | None = None,
        compute_check: bool = True,
    ) -> Settings:
        """Every setting of one invocation: the values given, over ``env`` (default ``os.environ``), over defaults.

        Each value is validated here, once; ``RuntimeUpdater.from_settings`` takes the result.

        Args:
            follow_active_repo: Without ``repo``/``LLAMA_RUNTIME_REPO``, use the repository the
                active runtime came from (as ``update``, ``check`` and ``plan`` do).
            keep: Runtimes each update keeps, as text (``--keep``; default ``LLAMA_RUNTIME_KEEP``, else 3).
            verifies: The caller verifies builds: a malformed provenance opt-in is then an error,
                never silently off.
            follow: ``newer`` (never a downgrade without a tag) or ``exact`` (``--follow``;
                default ``LLAMA_RUNTIME_FOLLOW``, else ``newer``).
            compute_check: Run the shipped check model on the build's device on every switch
                (``--no-compute-check``: False, recorded in the marker).

        Raises:
            UserInputError: A value is malformed (unknown backend, bad repo, URL or number).
        """
        return resolve_settings(
            home=home,
            api_url=api_url,
            repo=repo,
            backend=backend,
            token=token,
            require_provenance=require_provenance,
            env=env,
            channel=channel,
            follow_active_repo=follow_active_repo,
            keep=keep,
            fresh_companion=fresh_companion,
            verifies=verifies,
            ca_bundle=ca_bundle,
            follow=follow,
            compute_check=compute_check,
        )


def validate_repo(repo: str) -> str:
    """``owner/name`` or a :class:`UserInputError` saying what is valid."""
    value = repo.strip()
    name = value.partition("/")[2]
    # GitHub refuses "." and ".." as names and a ".git" suffix: such a "repo" only bends API paths.
    if not _REPO.match(value) or ".." in value or name == "." or name.lower().endswith(".git"):
        raise UserInputError(f"Malformed repository '{repo}'. Use OWNER/NAME, for example ggml-org/llama.cpp.")
    return value


def addressable(url: str) -> bool:
    """Whether ``url`` names a host and port a client can reach (``http://h:abc``, ``http://[::1`` cannot)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    return parts.scheme == "file" or bool(parts.hostname)


def github_token(env: Mapping[str, str], api_url: str = DEFAULT_API_URL) -> str | None:
    """The token the contract allows for ``api_url`` (see ``updater.credentials``).

    ``GITHUB_TOKEN``/``GH_TOKEN`` only for ``https://api.github.com``;
    ``LLAMA_RUNTIME_GITHUB_TOKEN`` for the configured origin when it is https
    or http on a loopback address. Blank values count as unset.
    """
    from llama_runtime.updater.credentials import token_for

    return token_for(api_url, env)


def env_number(
    env: Mapping[str, str], key: str, default: float, *, unit: str = "seconds", zero_ok: bool = False
) -> float:
    """A positive number (or 0 with ``zero_ok``) from ``env[key]``, or ``default`` when unset or blank.

    Raises:
        UserInputError: The value is not such a number (exit 2).
    """
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        kind = "0 or a positive number" if zero_ok else "a positive number"
        raise UserInputError(f"Invalid {key}={raw!r}; use {kind} of {unit}, e.g. 30.")
    return value


def _seconds(env: Mapping[str, str], key: str, default: float) -> float:
    return env_number(env, key, default)


def resolve_settings(
    *,
    home: str | Path | None = None,
    api_url: str | None = None,
    repo: str | None = None,
    backend: str | None = None,
    token: str | None = None,
    require_provenance: bool = False,
    env: Mapping[str, str] | None = None,
    channel: str | None = None,
    follow_active_repo: bool = True,
    keep: str | None = None,
    fresh_companion: bool = False,
    verifies: bool = True,
    ca_bundle: str | None = None,
    follow: str | None = None,
    compute_check: bool = True,
) -> Settings:
    """Merge flags with the environment and defaults, validating each value.

    Every setting of the invocation is read here, once, from ``env`` (default: the process's):
    nothing later reads the environment, so a malformed value fails before any request.

    ``verifies``: the command verifies builds (``update``, ``check``, ``install-file``,
    ``doctor --repair``), so a malformed ``LLAMA_RUNTIME_REQUIRE_PROVENANCE`` or provenance
    opt-in is exit 2 (never silently off); any other command warns and ignores it.

    ``follow_active_repo``: without ``--repo``/``LLAMA_RUNTIME_REPO``, use the
    repository the active runtime came from (``update``, ``check``, ``plan``);
    ``mirror sync`` keeps the plain default, as a fleet's mirror is not one machine's.

    Raises:
        UserInputError: A value is malformed (unknown backend, bad repo or URL).
    """
    env = os.environ if env is None else env
    home_path = _home_setting(home, env)
    url = (api_url or env.get("LLAMA_RUNTIME_GITHUB_API", "").strip() or DEFAULT_API_URL).rstrip("/")
    if is_oci_url(url):
        pass  # an OCI registry: its grammar is checked where it is opened (sources.oci.reference)
    elif not url.startswith(("https://", "http://", "file://")) or not addressable(url):
        raise UserInputError(f"Malformed API URL '{url}'. Use an http(s)://, file:// or oci:// URL.")
    given_repo = repo or env.get("LLAMA_RUNTIME_REPO", "").strip()
    repo_value = validate_repo(given_repo or (_active_repo(home_path) if follow_active_repo else None) or DEFAULT_REPO)
    backend_value, explicit = _backend_setting(backend, env)
    channel_value = _channel_request(channel, env, registry=is_oci_url(url))
    return Settings(
        home=home_path,
        api_url=url,
        repo=repo_value,
        backend=backend_value,
        token=token if token is not None else github_token(env, url),
        backend_explicit=explicit,
        read_timeout=_seconds(env, "LLAMA_RUNTIME_READ_TIMEOUT", READ_TIMEOUT_SECONDS),
        health_timeout=_seconds(env, "LLAMA_RUNTIME_HEALTH_TIMEOUT", SERVER_READY_TIMEOUT_SECONDS),
        api_deadline=_seconds(env, "LLAMA_RUNTIME_API_DEADLINE", API_DEADLINE_SECONDS),
        require_provenance=require_provenance
        or _only_if_verifying(lambda: env_flag(env, REQUIRE_PROVENANCE_ENV), False, verifies=verifies),
        channel=channel_value,
        parallel_downloads=download_parallelism(env),
        keep=retain_setting(keep, env),
        fresh_companion=fresh_companion,
        repo_explicit=bool(given_repo),
        pace=DownloadPace.from_env(env),
        provenance=_only_if_verifying(
            lambda: ProvenanceSettings.from_env(env), ProvenanceSettings(), verifies=verifies
        ),
        ca_bundle=_ca_bundle_setting(ca_bundle, env),
        server_port=_server_port(env),
        server_wait=env_number(env, "LLAMA_RUNTIME_SERVER_WAIT", SERVER_WAIT_DEFAULT_SECONDS),
        follow_exact=_follow_setting(follow, env),
        sandbox=_sandbox_setting(env),
        compute_check=compute_check,
    )


def _sandbox_setting(env: Mapping[str, str]) -> Literal["auto", "require"]:
    """``LLAMA_RUNTIME_SANDBOX``: ``auto`` (default) or ``require``.

    Raises:
        UserInputError: Any other value (exit 2), naming the valid ones.
    """
    raw = env.get("LLAMA_RUNTIME_SANDBOX", "").strip().lower() or "auto"
    if raw == "auto":
        return "auto"  # the common case imports nothing of the sandbox (start-up cost: shutil, bz2, lzma)
    from llama_runtime.runtime.sandbox import SANDBOX_MODES

    for mode in SANDBOX_MODES:
        if raw == mode:
            return mode
    raise UserInputError(
        f"Invalid LLAMA_RUNTIME_SANDBOX={raw!r}; use auto (the strongest sandbox this host offers) or require "
        "(refuse a host that offers none)."
    )


def _server_port(env: Mapping[str, str]) -> int | None:
    """``LLAMA_RUNTIME_SERVER_PORT``, else llama-server's own default; ``None`` for ``0`` (any free port).

    Raises:
        UserInputError: The variable is not a port number.
    """
    raw = env.get("LLAMA_RUNTIME_SERVER_PORT", "").strip()
    if not raw:
        return LLAMA_SERVER_DEFAULT_PORT
    port = decimal(raw)
    if port is None or port > 65535:
        raise UserInputError(
            f"LLAMA_RUNTIME_SERVER_PORT={raw[:40]!r} is not a port; use 1-65535, or 0 for any free port."
        )
    return port or None


#: How a client follows its channel: ``newer`` only (the default), or ``exact`` (down too).
FOLLOW_MODES: Final = ("newer", "exact")


def _follow_setting(flag: str | None, env: Mapping[str, str]) -> bool:
    """``--follow``, else ``LLAMA_RUNTIME_FOLLOW``: whether the channel is followed down too.

    Raises:
        UserInputError: Neither ``newer`` nor ``exact`` (exit 2).
    """
    given = (flag or "").strip()
    source = "--follow" if given else "LLAMA_RUNTIME_FOLLOW"
    value = (given or env.get("LLAMA_RUNTIME_FOLLOW", "").strip() or "newer").lower()
    if value not in FOLLOW_MODES:
        raise UserInputError(
            f"Invalid {source} {value!r}; use newer (never a downgrade without a tag) or exact "
            "(follow the channel wherever it is moved, back down too)."
        )
    return value == "exact"


def _ca_bundle_setting(flag: str | None, env: Mapping[str, str]) -> str | None:
    """``--ca-bundle``, else ``LLAMA_RUNTIME_CA_BUNDLE``: a file that exists (its PEM is read on connecting).

    Raises:
        UserInputError: The file named is not there.
    """
    given = (flag or "").strip()
    source = "--ca-bundle" if given else "LLAMA_RUNTIME_CA_BUNDLE"
    value = given or env.get("LLAMA_RUNTIME_CA_BUNDLE", "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise UserInputError(
            f"{source} {value} is not a file; give the PEM file of the CAs your servers' certificates chain to."
        )
    return str(path)


def _home_setting(home: str | Path | None, env: Mapping[str, str]) -> Path:
    """``--home``, else ``LLAMA_RUNTIME_HOME``, else the platform's data directory."""
    if home is not None and not str(home).strip():
        # `--home "$UNSET"` must never fall through to the real home (gc --keep 0 would prune it).
        raise UserInputError("--home is empty. Give a directory, or leave the flag out for the default home.")
    home_value = str(home or "") or env.get("LLAMA_RUNTIME_HOME", "").strip()
    if home_value:
        return Path(home_value).expanduser()
    from llama_runtime.runtime.layout import default_home

    return default_home()


def _backend_setting(backend: str | None, env: Mapping[str, str]) -> tuple[str, bool]:
    """The backend request and whether it was given (flag or environment) rather than defaulted."""
    if backend is not None:
        return parse_backend(backend, source="--backend"), True
    if env.get("LLAMA_RUNTIME_BACKEND", "").strip():
        return parse_backend(env["LLAMA_RUNTIME_BACKEND"], source="LLAMA_RUNTIME_BACKEND"), True
    return "auto", False


def _active_repo(home: Path) -> str | None:
    """The repository the active runtime came from; ``None`` when none is (readably) active.

    Like the stored backend request and channel: an update without ``--repo``
    keeps the repository the user chose. Any trouble reading the home is left
    to the command itself to report.
    """
    from llama_runtime.runtime.errors import LlamaRuntimeError
    from llama_runtime.runtime.layout import Home

    try:
        state = Home(home)
        pointer = state.read_pointer()
        if not pointer.active:
            return None
        repo = state.load(pointer.active).marker.repo
        return validate_repo(repo)
    except (LlamaRuntimeError, OSError, ValueError):
        return None


def _channel_request(flag: str | None, env: Mapping[str, str], *, registry: bool = False) -> Channel | None:
    """The channel asked for by flag, else by environment; ``None`` keeps the active runtime's.

    ``registry``: the source is an OCI registry, whose own channel tags are channels too.
    """
    if flag is None and not env.get("LLAMA_RUNTIME_CHANNEL", "").strip():
        return None  # the common case imports nothing of the release model (start-up cost)
    from llama_runtime.updater.release.channel import parse_channel

    if flag is not None:
        return parse_channel(flag, "--channel", registry=registry)
    return parse_channel(env["LLAMA_RUNTIME_CHANNEL"], "LLAMA_RUNTIME_CHANNEL", registry=registry)


#: Refuses a build without verified provenance when on; read by the verbs that verify builds.
REQUIRE_PROVENANCE_ENV: Final = "LLAMA_RUNTIME_REQUIRE_PROVENANCE"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean environment variable; a value that is neither is bad input, never silently off.

    A mistyped ``LLAMA_RUNTIME_REQUIRE_PROVENANCE=ture`` turning a safety check off would
    be the worst reading of it.
    """
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UserInputError(f"{name}={env[name]!r} is not a yes/no value. Use 1, true, yes or on (0, false, no or off).")


#: What ``--keep N`` accepts, said the same by every verb that takes it (update, check, gc).
KEEP_RULE: Final = (
    "use 0 (keep every runtime) or a whole number of 2 or more "
    "(runtimes kept in all; the active and the previous one are always among them)"
)


def retain_setting(flag: str | None, env: Mapping[str, str]) -> int:
    """How many runtimes an update keeps: ``--keep``, else ``LLAMA_RUNTIME_KEEP``, else 3.

    Raises:
        UserInputError: Not 0 or a whole number of 2 or more (exit 2, saying what is valid).
    """
    source, raw = ("--keep", flag) if flag is not None else (RETAIN_ENV, env.get(RETAIN_ENV, ""))
    value = raw.strip()
    if flag is None and not value:
        return DEFAULT_RETAIN
    # 1 would promise what never happens: the rollback target is always kept.
    if not value.isdigit() or int(value) == 1:
        raise UserInputError(f"{source}={raw!r} is not valid: {KEEP_RULE}.")
    return int(value)


def _only_if_verifying(read: Callable[[], _T], default: _T, *, verifies: bool) -> _T:
    """A provenance setting: a typo is exit 2 where it matters, a warning (and ``default``) where it cannot."""
    try:
        return read()
    except UserInputError as exc:
        if verifies:
            raise
        from llama_runtime.updater.logs import get_logger

        get_logger("llama_runtime.config").warning(f"{exc.message} Ignored: this command verifies no build.")
        return default


def download_parallelism(env: Mapping[str, str]) -> int:
    """Concurrent ranges per download from ``LLAMA_RUNTIME_PARALLEL_DOWNLOADS`` (default 4).

    Raises:
        UserInputError: The value is not a whole number from 1 to 16.
    """
    raw = env.get(PARALLEL_DOWNLOADS_ENV, "").strip()
    if not raw:
        return DEFAULT_PARALLEL_DOWNLOADS
    count = decimal(raw)
    if count is None or not 1 <= count <= MAX_PARALLEL_DOWNLOADS:
        raise UserInputError(
            f"{PARALLEL_DOWNLOADS_ENV}={raw!r} is not valid: use a whole number from 1 "
            f"(one stream) to {MAX_PARALLEL_DOWNLOADS}."
        )
    return count


# -- provenance_env: The signer opt-ins of the environment, parsed and checked (pure). -----------------

# GitHub's own name rules: an owner is letters, digits and inner hyphens (at most 39);
# a repository name letters, digits, '.', '-' and '_' (not '.' or '..').
_GH_REPO: Final = r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?(?:$|/|=))[A-Za-z0-9._-]{1,100}"
# Workflows live in .github/workflows/ as .yml or .yaml files (GitHub docs, "Workflow syntax").
_WORKFLOW: Final = r"\.github/workflows/[A-Za-z0-9._-]+\.ya?ml"
# Patterns, not compiled ones: only a provenance opt-in needs them (re caches each on first use).
_REPO_RE: Final = rf"^{_GH_REPO}$"
_WORKFLOW_RE: Final = rf"^{_WORKFLOW}$"
_SIGNER_RE: Final = rf"^{_GH_REPO}/{_WORKFLOW}$"
_WORKFLOW_FORM: Final = (
    "LLAMA_RUNTIME_PROVENANCE_WORKFLOW=OWNER/NAME=.github/workflows/FILE.yml (several separated by commas)"
)
_SIGNER_FORM: Final = (
    "LLAMA_RUNTIME_PROVENANCE_SIGNER=OWNER/NAME=SIGNER-OWNER/SIGNER-NAME/.github/workflows/FILE.yml "
    "(several separated by commas)"
)


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _pair(item: str, right: str, form: str, env: str) -> tuple[str, str]:
    repo, _, target = (part.strip() for part in item.partition("="))
    if not re.match(_REPO_RE, repo) or not re.match(right, target):
        raise UserInputError(f"{env} has {item!r}, which is not of the form {form}.")
    return repo.casefold(), target


def parse_workflows(value: str) -> tuple[str | None, dict[str, str]]:
    """The bare (deprecated) workflow pin and the per-repository pins of ``value``.

    Raises:
        UserInputError: An item is neither ``owner/name=path`` nor a bare path,
            two bare paths are given, or one repository is pinned twice.
    """
    env = "LLAMA_RUNTIME_PROVENANCE_WORKFLOW"
    bare: str | None = None
    pins: dict[str, str] = {}
    for item in _items(value):
        if "=" not in item:
            if not re.match(_WORKFLOW_RE, item) or bare is not None:
                raise UserInputError(f"{env} has {item!r}, which is not of the form {_WORKFLOW_FORM}.")
            bare = item
            continue
        repo, workflow = _pair(item, _WORKFLOW_RE, _WORKFLOW_FORM, env)
        if repo in pins:
            raise UserInputError(f"{env} pins {repo} twice; give one workflow per repository ({_WORKFLOW_FORM}).")
        pins[repo] = workflow
    return bare, pins


def parse_signers(value: str) -> dict[str, str]:
    """The reusable-workflow opt-ins of ``value``: casefolded ``owner/name`` -> ``o/n/.github/workflows/x.yml``.

    Raises:
        UserInputError: An item is not ``owner/name=o/n/.github/workflows/x.yml``,
            or one repository is named twice.
    """
    env = "LLAMA_RUNTIME_PROVENANCE_SIGNER"
    signers: dict[str, str] = {}
    for item in _items(value):
        repo, signer = _pair(item, _SIGNER_RE, _SIGNER_FORM, env)
        if repo in signers:
            raise UserInputError(f"{env} names {repo} twice; give one signer per repository ({_SIGNER_FORM}).")
        signers[repo] = signer
    return signers
