"""A small GitHub releases client: one release by tag, or the newest build.

Invariants:
    * No ``httpx`` exception leaves this module; every failure is a
      :class:`~runtime.errors.RemoteError` subclass with one readable sentence.
    * The token goes only to the API origin (scheme, host and port of
      ``api_url``), never to download or CDN hosts, and never in clear text
      over a network (http only to a loopback address).
    * A release this client returns has a tag of the tag grammar and plain
      asset names (``remote_names``); one asked for by tag is that tag.
    * Bodies are read with a decoded-size cap and JSON with a depth cap.
    * Rate-limit refusals are reported, never retried here: the caller decides
      whether to wait, because a tight retry loop only burns the quota.
    * Given ``api_deadline``, every API request of the client (its tries, backoff
      and body reads) and every small asset read draw on one :class:`TimeBudget`:
      no wait outlasts what is left of it. A server that drips its *headers*
      is bounded per read only (httpcore takes the headers' read timeout once).

One request's retries and decoding are the ``github_transport`` section below; what a rate
limit means, :mod:`.github_limits`; conditional requests' store, the ``etag_cache`` section.
"""

from __future__ import annotations

import base64
import json
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

import httpx

from llama_runtime.runtime.clock import RETRY_ATTEMPTS, SYSTEM_CLOCK, Clock, TimeBudget
from llama_runtime.runtime.errors import (
    NetworkError,
    RateLimitError,
    ReleaseNotFoundError,
    RemoteDataError,
    RemoteError,
)
from llama_runtime.runtime.fsutil import read_cache, write_record
from llama_runtime.updater.credentials import (
    checked_token,
    may_send_token,
    redact_library_logs,
    redact_text,
    redact_url,
    split_user_info,
    token_names_for,
)
from llama_runtime.updater.logs import get_logger, redact_with, warn_state
from llama_runtime.updater.net.body import ACCEPT_ENCODING
from llama_runtime.updater.net.limits import RateLimit
from llama_runtime.updater.net.session import OriginCredential, Session, connection_pool
from llama_runtime.updater.release.release import (
    Asset,
    Release,
    check_release,
    is_ref_name,
    is_valid_remote_tag,
    parse_release,
    printable,
    quote_remote,
)
from llama_runtime.updater.release.remote_json import loads_bounded
from llama_runtime.updater.release.tags import is_release_version
from llama_runtime.updater.sources.github_limits import rate_limit_error, rate_limit_of
from llama_runtime.updater.sources.source import Build, EtagCache, RepositoryFacts

if TYPE_CHECKING:
    from llama_runtime.updater.release.channel import Channel, ResolvedRelease

__all__ = ["GitHubClient"]


# -- github_transport: One API GET: retried on dropped connections and 5xx, size-capped. -------------------------

# A dead host should fail fast; GitHub can be slow to render big release lists.
DEFAULT_TIMEOUT: Final[httpx.Timeout] = httpx.Timeout(30.0, connect=10.0)
#: Tries for transient 5xx and dropped connections (the project's one schedule, runtime.clock).
ATTEMPTS: Final[int] = RETRY_ATTEMPTS
# What static web servers and S3-style buckets send for an extension-less file.
_STATIC_FILE_TYPES: Final[frozenset[str]] = frozenset(
    {"application/octet-stream", "binary/octet-stream", "text/plain", "unknown"}
)
# Characters of a Content-Type quoted in a message (a hostile header cannot flood it).
_CTYPE_QUOTE_CHARS: Final[int] = 60


def decode_json(response: httpx.Response, raw: bytes) -> Any:
    """The JSON of an answer labelled JSON (or as a static file), depth- and size-bounded.

    Raises:
        RemoteError: The answer is not release data (an HTML page, malformed JSON).
    """
    ctype = response.headers.get("content-type", "unknown").split(";")[0].strip() or "unknown"
    if ctype == "text/html":
        from llama_runtime.updater.sources.mirror_reader import check_html_answer

        check_html_answer(response, raw)  # a mirror's index.html holds JSON; any other page is refused
    # Static servers and buckets label extension-less mirror files as binary or
    # text; an HTML page is never release data (a portal or an error page).
    elif "json" not in ctype and ctype not in _STATIC_FILE_TYPES:
        raise RemoteError(
            f"GitHub answered with something that is not release data ({printable(ctype[:_CTYPE_QUOTE_CHARS])})."
        )
    try:
        return loads_bounded(raw, what="release data")
    except ValueError as exc:
        raise RemoteError(
            f"GitHub answered with something that is not release data ({printable(ctype[:_CTYPE_QUOTE_CHARS])})."
        ) from exc


# -- etag_cache: Where ETags and JSON bodies persist, so a repeat request is a free 304. -------------------------

#: Largest the cache file grows (bytes of JSON). Past it the entries written longest ago go first:
#: a fork's manifests are cached per release (up to 1 MiB each), and a cache is no archive.
MAX_CACHE_BYTES: Final[int] = 16 * 1024 * 1024


class JsonFileEtagCache:
    """An :class:`EtagCache` kept in one JSON file, replaced atomically on each write.

    A missing or unreadable file is an empty cache: the worst outcome is one
    full (non-304) request.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        data = read_cache(self.path, warn=warn_state)
        return data if isinstance(data, dict) else {}

    def get(self, url: str) -> tuple[str, Any] | None:
        """The stored ``(etag, decoded JSON)`` for ``url``, if any."""
        entry = self._load().get(url)
        if isinstance(entry, dict) and isinstance(entry.get("etag"), str) and "body" in entry:
            return entry["etag"], entry["body"]
        return None

    def put(self, url: str, etag: str, body: Any) -> None:
        """Remember ``etag`` and ``body`` for ``url`` (one atomic replace of the file).

        A cache that cannot be written (a read-only home, a full disk) is no
        cache: the answer in hand is still right, and the next request is a
        full one instead of a free 304. The file is left as it was.
        """
        data = self._load()
        data.pop(url, None)  # re-inserted last: the newest entry is dropped last
        data[url] = {"etag": etag, "body": body}
        # Each entry's size is measured once; the oldest go until the rest fit (the newest always stays).
        sizes = {key: len(json.dumps({key: entry})) for key, entry in data.items()}
        total = sum(sizes.values())
        for key in list(data)[:-1]:
            if total <= MAX_CACHE_BYTES:
                break
            total -= sizes[key]
            del data[key]
        try:
            write_record(self.path, data)
        except OSError:
            return


# -- github ------------------------------------------------------------------------------------------------------

# 100 is GitHub's maximum page size; one page covers months of llama.cpp builds.
_PER_PAGE: Final[int] = 100
#: Longest a small asset (a pointer, a build manifest, at most 1 MiB) may take in full
#: (seconds): ample for a slow link, and a server that drips it cannot hold the update lock.
SMALL_ASSET_DEADLINE_SECONDS: Final[float] = 60.0


log = get_logger("llama_runtime.github")


class GitHubClient:
    """Reads releases of one repository from the GitHub REST API.

    Args:
        api_url: API root, e.g. ``https://api.github.com``.
        repo: ``owner/name``.
        token: Sent as ``Authorization: Bearer`` to the API origin only.
        transport: httpx transport override (a ``file://`` mirror's
            :class:`~updater.sources.mirror_reader.FileTransport`, tests).
        timeout: httpx timeouts; connect 10 s, read 30 s by default.
        etag_cache: Where ETags and bodies persist for conditional requests.
        verify: What HTTPS certificates are trusted (:func:`~llama_runtime.updater.net.tls.ssl_context`;
            httpx's certifi by default).
        sleep: Backoff sleep, injectable so tests never wait.
        attempts: Tries for 5xx and connection errors.
        clock: Deadlines of small downloads and attestation bundles.
        api_deadline: Seconds all API requests of this client may take together, retries,
            backoff and slow answers included (``None``: no overall bound, only each request's).
    """

    def __init__(
        self,
        api_url: str,
        repo: str,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        etag_cache: EtagCache | None = None,
        verify: ssl.SSLContext | bool = True,
        sleep: Callable[[float], None] = time.sleep,
        attempts: int = ATTEMPTS,
        clock: Clock = SYSTEM_CLOCK,
        api_deadline: float | None = None,
    ) -> None:
        # Credentials in the URL leave it here: every URL built from api_url is free of them.
        self.api_url, user_info = split_user_info(api_url.rstrip("/"))
        self._repo = repo
        self.etag_cache = etag_cache
        self.sleep = sleep
        self.attempts = attempts
        self.clock = clock
        self.api_budget = TimeBudget(math.inf if api_deadline is None else api_deadline, clock)
        # Whether the newest JSON answer carried GitHub's rate-limit headers: the API's own, not a mirror's file.
        self._answered_by_api = False
        self._pages: dict[int, list[Release]] = {}  # release pages builds() read (page number -> releases)
        # Last guard of the token policy: whatever the caller passes, a token
        # never travels in clear text to a host that is not this machine.
        self._token = checked_token(token) if token and may_send_token(self.api_url) else None
        # The same rule for a password in --api-url: HTTP Basic, to the API origin only (RFC 7617).
        self._basic = (
            base64.b64encode(user_info.encode()).decode() if user_info and may_send_token(self.api_url) else None
        )
        secret = f"Bearer {self._token}" if self._token else f"Basic {self._basic}" if self._basic else None
        self._credential = OriginCredential(self.api_url, secret) if secret else None
        redact_library_logs()  # signed CDN and bundle URLs never reach a log line in clear
        redact_with(redact_text)  # nor any of ours, whatever field names them
        # Every request says llama-runtime/<version> (GitHub requires a User-Agent): the network layer's.
        http = connection_pool(transport=transport, timeout=_as_timeout(timeout), verify=verify)
        self.net = Session(http, who="the API", budget=self.api_budget, attempts=attempts, sleep=sleep, clock=clock)
        self._http = http

    @property
    def repo(self) -> str:
        """``owner/name`` of the repository."""
        return self._repo

    @property
    def http(self) -> httpx.Client:
        """The connection pool; downloads share it (and its timeouts)."""
        return self._http

    def close(self) -> None:
        """Release the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """``Authorization`` for ``url`` if it is on the API origin, else nothing."""
        return self._credential.auth_headers_for(url) if self._credential is not None else {}

    @property
    def last_rate_limit(self) -> RateLimit | None:
        """GitHub's ``x-ratelimit-*`` headers of the last API answer that sent them (kept by the session)."""
        return self.net.quota

    # -- BuildSource -------------------------------------------------------------------------
    def resolve(
        self, channel: Channel = "stable", *, tag: str | None = None, installed: str | None = None
    ) -> ResolvedRelease:
        """The build ``tag`` or ``channel`` stands for, through GitHub's releases (:mod:`.resolve`).

        Raises:
            UserInputError: A manifest pin (``TAG@sha256:…``) or a channel besides ``stable`` and
                ``nightly``: GitHub has neither.
            ReleaseNotFoundError, ReleaseIncompleteError, IntegrityError: As :func:`.resolve.resolve_github`.
            RateLimitError, NetworkError, RemoteError: As :meth:`get_release`.
        """
        from llama_runtime.updater.sources.resolve import resolve_github

        return resolve_github(self, channel, tag=tag, installed=installed)

    def builds(self, limit: int) -> list[Build]:
        """The newest builds on the release pages, each with the semver releases naming it (:mod:`.resolve`).

        Each page is read once per client (a client lives for one command).
        """
        from llama_runtime.updater.sources.resolve import github_builds

        return github_builds(self, limit, self._pages)

    def repository(self) -> RepositoryFacts:
        """The repository's default branch, trusted only when GitHub's own API said it (see below)."""
        branch, trusted = self._default_branch()
        return RepositoryFacts(branch, trusted)

    # -- release listing (the mirror writer, ``list --available``) --------------------------
    def get_release(self, tag: str) -> Release:
        """The published release whose tag is exactly ``tag``.

        Raises:
            ReleaseNotFoundError: No such release (a bare git tag counts as none).
            RateLimitError: GitHub refused because the quota is spent.
            NetworkError: Connection failures or 5xx after all attempts.
            RemoteError: Any other refusal or a body that is not release data.
        """
        url = f"{self.api_url}/repos/{self.repo}/releases/tags/{tag}"
        payload = self._get_releases(url, f"Release {tag} not found in {self.repo}.")
        return _absolute_urls(check_release(parse_release(self.repo, payload), asked=tag), url)

    def recent_releases(self, per_page: int = _PER_PAGE, page: int = 1) -> list[Release]:
        """A page of the repository's releases, newest first, as GitHub orders them.

        Args:
            per_page: Page size, 1 to 100 (GitHub's maximum). The scheduled
                check asks for few: the whole page is re-sent whenever any
                download count in it changes.
            page: Which page (1 is the newest).

        Raises:
            ReleaseNotFoundError: The repository does not exist.
            RateLimitError, NetworkError, RemoteError: As :meth:`get_release`.
        """
        per_page = max(1, min(per_page, _PER_PAGE))
        url = f"{self.api_url}/repos/{self.repo}/releases?per_page={per_page}&page={max(1, page)}"
        payload = self._get_releases(url, f"No releases found in {self.repo}.")
        if not isinstance(payload, list):
            raise RemoteError("GitHub answered with something that is not release data (not a list).")
        return [_absolute_urls(r, url) for r in _usable([parse_release(self.repo, item) for item in payload])]

    def _default_branch(self) -> tuple[str | None, bool]:
        """The repository's default branch (``None`` when it cannot be learnt here), and whether GitHub said it.

        ``GET /repos/{owner}/{repo}`` (GitHub docs, "Get a repository": the
        repository object's ``default_branch``), cached with its ETag like the
        release reads, so a repeat is a free 304. Only GitHub's own answer
        (with its rate-limit headers) counts: what a mirror stores there
        (``mirror sync`` writes it) is what the mirror says about itself, and
        whoever edits the mirror could widen which branch may sign. A mirror's
        answer, a refusal or a body of another shape all mean "unknown": the
        signer policy then accepts ``master`` and ``main`` and says so (and
        upstream's own is known without asking), and no install fails here.
        """
        url = f"{self.api_url}/repos/{self.repo}"
        try:
            payload = self._get_json(url, f"The repository {self.repo} was not found.")
        except RemoteError as exc:
            log.debug("default branch unknown", repo=self.repo, reason=exc.message)
            return None, False
        if not self._answered_by_api:
            log.debug("default branch unknown", repo=self.repo, reason="a mirror's answer, not GitHub's")
            return None, False
        branch = payload.get("default_branch") if isinstance(payload, dict) else None
        if isinstance(branch, str) and is_ref_name(branch) and not branch.startswith("refs/"):
            return branch, True
        return None, False

    def latest_published(self) -> Release:
        """GitHub's ``/releases/latest``: the newest non-draft, non-prerelease release.

        GitHub orders by ``created_at`` (the commit date). For upstream today
        that is a semver release without binaries (see :mod:`updater.release.channel`).

        Raises:
            ReleaseNotFoundError: The repository has no published release.
            RateLimitError, NetworkError, RemoteError: As :meth:`get_release`.
        """
        url = f"{self.api_url}/repos/{self.repo}/releases/latest"
        payload = self._get_releases(url, f"No releases found in {self.repo}.")
        return _absolute_urls(check_release(parse_release(self.repo, payload)), url)

    def version_tags(self) -> list[str] | None:
        """The repository's semver release tags (``vX.Y.Z``), in no order: where ``stable`` falls back.

        ``GET /repos/{owner}/{repo}/git/matching-refs/tags/v`` (docs.github.com,
        "List matching references"): one small answer, conditional on its ETag,
        that changes only when such a tag is pushed (make-release.yml pushes one
        per release, by hand). Entries that are not ``refs/tags/vX.Y.Z`` are ignored.

        Returns:
            The tags, or ``None`` when this source does not serve the route (a
            static mirror, a proxy or forge that serves releases only: 404, any
            other refusal, an answer that is no list): unknown, which the caller
            learns otherwise, never a failure.

        Raises:
            RateLimitError, NetworkError: As :meth:`get_release`.
        """
        url = f"{self.api_url}/repos/{self.repo}/git/matching-refs/tags/v"
        try:
            payload = self._get_json(url, f"No tags found in {self.repo}.")
        except (RateLimitError, NetworkError):
            raise
        except RemoteError as exc:
            log.debug("version tags unknown", repo=self.repo, reason=exc.message)
            return None
        if not isinstance(payload, list):
            log.debug("version tags unknown", repo=self.repo, reason="the answer is not a list")
            return None
        refs = (item.get("ref") for item in payload if isinstance(item, dict))
        tags = (ref.removeprefix("refs/tags/") for ref in refs if isinstance(ref, str) and ref.startswith("refs/tags/"))
        return [tag for tag in tags if is_release_version(tag)]

    def attestations(self, sha256: str) -> object:
        """The build attestations published for the file ``sha256``, or ``[]`` for none.

        ``GET /repos/{owner}/{repo}/attestations/sha256:{hex}`` answers
        ``{"attestations": [{"bundle": …, "repository_id": …}, …]}``; 404 means
        none is published (a mirror without one answers the same). Not cached:
        an attestation is fetched once per install. An entry listed as
        ``"bundle": null`` with a ``bundle_url`` is fetched from there (no token,
        within :data:`SMALL_ASSET_DEADLINE_SECONDS` for all of them: a bundle is
        a few kB, like a pointer file) and put inline
        (:mod:`~updater.sources.bundle_url`); one that fails is named in the
        result's ``failures`` instead.

        Returns:
            ``[]``, or a :class:`~updater.sources.bundle_url.ResolvedAttestations`.

        Raises:
            RateLimitError, NetworkError, RemoteError: As :meth:`get_release`.
        """
        from llama_runtime.updater.sources.bundle_url import fetch_bundle, resolve_bundle_urls

        url = f"{self.api_url}/repos/{self.repo}/attestations/sha256:{sha256}"
        try:
            answer = self._get_json(url, "", use_cache=False)
        except ReleaseNotFoundError:
            return []
        give_up_at = self.clock.monotonic() + SMALL_ASSET_DEADLINE_SECONDS

        def fetch(bundle_url: str, budget: int) -> tuple[dict[str, Any], int]:
            return fetch_bundle(
                self.net,
                bundle_url,
                api_url=self.api_url,
                budget=budget,
                give_up_at=give_up_at,
                deadline_s=SMALL_ASSET_DEADLINE_SECONDS,
                clock=self.clock,
            )

        return resolve_bundle_urls(answer, fetch)

    def asset_request(self, asset: Asset) -> tuple[str, dict[str, str]]:
        """URL and headers to download ``asset``.

        With a token, the API asset URL (``Accept: application/octet-stream``):
        ``browser_download_url`` does not accept a token, so it is the only way
        into a private repository. GitHub answers 302 to a signed CDN URL, which
        is followed *without* the token (the CDN refuses two auth mechanisms,
        octokit/octokit.js #967). Without a token, ``browser_download_url``:
        it costs no API quota.
        """
        headers = {"Accept": "application/octet-stream"}
        if asset.api_url and self.auth_headers_for(asset.api_url):
            return asset.api_url, {**headers, **self.auth_headers_for(asset.api_url)}
        return asset.download_url, headers

    def read_small_asset(self, asset: Asset, max_bytes: int) -> bytes:
        """The whole body of a small asset (``nightly-tag.txt``), at most ``max_bytes``.

        The token goes to the API origin only; redirects to another origin are
        followed without it (httpx drops ``Authorization`` across origins, and
        :meth:`asset_request` adds it for the API URL alone).

        Raises:
            IntegrityError: The body is longer than ``max_bytes``.
            NetworkError, RemoteError: The download failed, or took longer than
                :data:`SMALL_ASSET_DEADLINE_SECONDS` or what is left of the API deadline.
        """
        url, _headers = self.asset_request(asset)
        with self.api_budget.spending():
            return self._read_small(asset, url, {"Accept": "application/octet-stream"}, max_bytes)

    def _read_small(self, asset: Asset, url: str, headers: dict[str, str], max_bytes: int) -> bytes:
        """:meth:`read_small_asset`'s one GET, within the smaller of its own deadline and the API's."""
        from llama_runtime.runtime.errors import IntegrityError

        try:
            response, body = self.net.fetch(
                url,
                headers=headers,
                credentials=self._credential,
                cap=max_bytes,
                what=asset.name,
                deadline_s=SMALL_ASSET_DEADLINE_SECONDS,
            )
        except RemoteDataError as exc:  # the cap: no pointer is that long
            raise IntegrityError(f"{asset.name} is larger than {max_bytes} bytes; refusing to read it.") from exc
        if response.status_code != 200:
            self._raise_for_status(response, f"{asset.name} is not published in {self.repo}.")
        return body

    # -- transport -------------------------------------------------------------------------
    def _get_releases(self, url: str, not_found: str) -> Any:
        """:meth:`_get_json` of a release route; a 404 of a repository GitHub does not know says so.

        Raises:
            ReleaseNotFoundError: No such release, or (GitHub said so) no such repository.
        """
        try:
            return self._get_json(url, not_found)
        except ReleaseNotFoundError:
            if self._repository_missing():
                raise ReleaseNotFoundError(
                    f"The repository {self.repo} was not found at {redact_url(self.api_url)}.",
                    hint="Check --repo (LLAMA_RUNTIME_REPO) for spelling; a private repository needs a token "
                    "(LLAMA_RUNTIME_GITHUB_TOKEN).",
                ) from None
            raise

    def _repository_missing(self) -> bool:
        """Whether GitHub itself answers ``GET /repos/{owner}/{repo}`` with 404 (one request, on a 404 only).

        Only an answer with GitHub's rate-limit headers counts: a static mirror's web server may keep no
        repository object, and its 404 says nothing about the repository.
        """
        url = f"{self.api_url}/repos/{self.repo}"
        headers = {"Accept": "application/vnd.github+json"}
        try:
            response, _ = self.net.fetch(
                url, headers=headers, credentials=self._credential, what=f"the answer for {redact_url(url)}", attempts=1
            )
        except RemoteError:  # NetworkError too: unknown, so the release's own 404 stands
            return False
        return response.status_code == 404 and "x-ratelimit-limit" in response.headers

    def _get_json(self, url: str, not_found: str, *, use_cache: bool = True) -> Any:
        cached = self.etag_cache.get(url) if self.etag_cache and use_cache else None
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        if cached:
            headers["If-None-Match"] = cached[0]
        response, raw = self.net.fetch(
            url, headers=headers, credentials=self._credential, what=f"an answer for {redact_url(url)}"
        )
        self._answered_by_api = "x-ratelimit-limit" in response.headers
        quota = rate_limit_of(response)
        if quota is not None:  # a mirror reports none: keep what the API said last
            self.net.quota = quota
        log.debug(
            "github",
            url=url,
            status=response.status_code,
            conditional=bool(cached),
            rate_remaining=response.headers.get("x-ratelimit-remaining"),
        )
        if response.status_code == 304 and cached:
            return cached[1]
        self._raise_for_status(response, not_found, raw)
        body = decode_json(response, raw)
        etag = response.headers.get("etag")
        if self.etag_cache and etag and use_cache:
            self.etag_cache.put(url, etag, body)
        return body

    def _raise_for_status(self, response: httpx.Response, not_found: str, body: bytes = b"") -> None:
        status = response.status_code
        if status < 300:
            return
        if status == 404:
            hint = "`llama-runtime list --available` shows the releases this host can install."
            # GitHub (and GitHub Enterprise) answer every API request with rate-limit headers;
            # a static mirror's web server does not, and one that 404s everything is often
            # one its web server may not read.
            if "x-ratelimit-limit" not in response.headers:
                from llama_runtime.updater.sources.mirror_reader import asked_url, mirror_not_found

                asked = asked_url(response)
                not_found, hint = mirror_not_found(redact_url(self.api_url), asked.path if asked else "", not_found)
            raise ReleaseNotFoundError(not_found, hint=hint)
        if status == 401:
            sent = token_names_for(self.api_url) or "the token"
            raise RemoteError(f"GitHub rejected the token (HTTP 401); fix or unset {sent}.")
        if status in (403, 429):
            rate_error = rate_limit_error(response, body, has_token=bool(self._token), api_url=self.api_url)
            if rate_error is not None:
                raise rate_error
            raise RemoteError(f"GitHub refused the request (HTTP {status}) for {self.repo}.")
        if status >= 500:
            raise NetworkError(
                f"GitHub kept failing with HTTP {status} after {self.attempts} attempts; try again later."
            )
        raise RemoteError(f"GitHub answered HTTP {status} for {self.repo} releases.")


def _as_timeout(timeout: httpx.Timeout | float) -> httpx.Timeout:
    return timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)


def _absolute_urls(release: Release, json_url: str) -> Release:
    """Resolve relative ``browser_download_url`` values (a mirror's) against the JSON's URL.

    Raises:
        RemoteDataError: A download URL is not a URL at all (control characters …).
    """
    base = httpx.URL(json_url)
    assets = []
    for a in release.assets:
        try:
            url = httpx.URL(a.download_url)
            absolute = a if url.is_absolute_url else replace(a, download_url=str(base.join(url)))
        except httpx.InvalidURL as exc:
            raise RemoteDataError(
                f"The server sent a download URL for {a.name} that is not a URL ({quote_remote(a.download_url)}); "
                "nothing was kept."
            ) from exc
        assets.append(absolute)
    return replace(release, assets=tuple(assets))


def _usable(releases: list[Release]) -> list[Release]:
    """The releases of a list whose tag and asset names follow the rules.

    One odd entry of a fork's list (a ``nightly`` tag, say) must not hide the
    others; it is left out and can never become a candidate, a path or a line
    on the terminal. A release asked for by tag is refused instead (exit 8).
    """
    kept: list[Release] = []
    for release in releases:
        if not is_valid_remote_tag(release.tag):
            log.warning("release with an invalid tag ignored", tag=quote_remote(release.tag))
            continue
        try:
            kept.append(check_release(release))
        except RemoteDataError as exc:
            log.warning("release with an invalid asset name ignored", tag=release.tag, reason=exc.message)
    return kept
