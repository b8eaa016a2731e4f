"""A real HTTP server on 127.0.0.1 that answers like GitHub's releases API and asset CDN.

Two listeners, like the real thing: the *API* host (``127.0.0.1:P1``) serves
``/api/repos/...`` JSON and the ``/dl/...`` web download URLs, which answer 302
to a signed URL on the *blob* host (``localhost:P2``). Being a different origin,
the blob host lets tests assert that no ``Authorization`` crossed the redirect.

By default it publishes the way ggml-org/llama.cpp does since August 2026
(``scheme="2026"``; sources: ggml-org/llama.cpp PR #27485 "ci : add
nightly-tag.txt to make-release", scripts/make-release-desc.sh;
lemonade-sdk/lemonade PR #3450 "/releases/latest on ggml-org/llama.cpp no
longer returns a build tag ... flagged its bNNNN nightlies as prereleases";
hybridgroup/yzma PR #297):

* a ``bNNNN`` build of the upstream repository is a **prerelease**;
* each build added is also cut as a semver release ``v0.N.0`` (non-prerelease,
  what ``/releases/latest`` returns) whose only asset ``nightly-tag.txt``
  names the build, unless the test asks for a nightly only (``stable=False``
  or ``prerelease=True``);
* forks (any other repository) publish plain non-prerelease builds, as
  unslothai and janhq still do. ``scheme="legacy"`` is upstream before August 2026.

Upstream's real cadence since then (shared/reference/upstream-2026-10.md, "Stable
lags nightly"): semver releases are cut by hand, one to two weeks apart, patch
releases included (v0.4.1), so ``stable`` is 100–200 builds behind the newest
build. ``FakeGitHub(auto_cut=False)`` publishes builds only, and
:meth:`FakeGitHub.cut_version` cuts a release at a chosen build the way
make-release.yml does: release first, ``nightly-tag.txt`` after (or never).

It also models what the updater's request budget depends on:

* ``download_count`` grows with every download, and it is part of the JSON,
  so a release's (and the list's) ETag changes whenever someone downloads
  (github_api.md §0);
* a ``304`` is free of the primary quota only for requests "correctly
  authorized with an Authorization header" (GitHub docs, "Best practices for
  using the REST API"); :attr:`FakeGitHub.quota_used` counts what GitHub would;
* secondary rate limits: 403/429 with quota left and no ``retry-after``,
  body "You have exceeded a secondary rate limit" (KnpLabs/php-github-api
  PR #1072 shows such a 403 with ``X-RateLimit-Remaining: 14``);
* private repositories: 404 without a token, ``browser_download_url`` refused,
  the API asset URL with ``Accept: application/octet-stream`` and the token
  answering 302 to the blob host, which rejects a request that still carries
  ``Authorization`` with 400 (octokit/octokit.js #967);
* the blob host answers with a strong ``ETag`` and ``Last-Modified`` like S3;
* attestations listed by ``bundle_url`` (``add_attestation(..., by_url=True)``):
  ``"bundle": null`` and a pre-signed, expiring URL on the blob host serving the
  bundle snappy-compressed (``application/x-snappy``, ``.json.sn``, block format
  by default), and GitHub's release attestations listed beside provenance
  (denoland/clawpatrol PR #770, aaif-goose/goose PR #10557,
  terraform-linters/tflint PR #2593; see updater/sources/bundle_url.py).
* ``GET /repos/{owner}/{repo}`` answers a small repository object whose
  ``default_branch`` the signer policy reads (:meth:`FakeGitHub.repository_json`).

Every request is logged in :attr:`FakeGitHub.requests`; faults are injected per
path or per asset name with :meth:`FakeGitHub.inject`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

_CHUNK = 64 * 1024
_INVERT = bytes(255 - i for i in range(256))
_RATE_LIMIT_BODY = (
    b'{"message":"API rate limit exceeded for 127.0.0.1.","documentation_url":'
    b'"https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}'
)
_SECONDARY_LIMIT_BODY = (
    b'{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before trying again.",'
    b'"documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}'
)
_NOT_FOUND_BODY = b'{"message":"Not Found","documentation_url":"https://docs.github.com/rest"}'
UPSTREAM_REPOS = frozenset({"ggml-org/llama.cpp", "ggerganov/llama.cpp"})
NIGHTLY_TAG_ASSET = "nightly-tag.txt"
#: The signature of every pre-signed attestation ``bundle_url``: tests assert it never leaves the client.
BUNDLE_URL_SIGNATURE = "bUF5X25ldmVyX2JlX2xvZ2dlZA%3D%3D"
# An Azure SAS query as the URLs in tflint PR #2593 carry one (expiry, permission, signature).
_SAS_QUERY = f"se=2026-12-01T10%3A00%3A00Z&sp=r&sv=2025-01-05&sr=b&sig={BUNDLE_URL_SIGNATURE}"
#: GitHub's release attestation of an immutable release: predicate and signer SAN as
#: in-toto/attestation spec/predicates/release.md and cli/cli #11993 describe them.
RELEASE_PREDICATE = "https://in-toto.io/attestation/release/v0.1"
RELEASE_SIGNER = "https://dotcom.releases.github.com"
_LAST_MODIFIED = "Mon, 30 Nov 2026 09:00:00 GMT"


@dataclass
class Fault:
    """One misbehaviour, applied to the next ``times`` matching requests (``None``: all).

    Status faults (``status``, ``html``) hit the first matching request of any
    kind; ``redirect_loop`` answers 302 to the same URL; the body faults (reset,
    truncate, extra bytes, drip, ignore Range, wrong bytes) hit responses with a body.
    """

    status: int | None = None
    times: int | None = 1
    rate_limited: bool = False  # x-ratelimit-remaining: 0 plus a reset time
    secondary: bool = False  # a secondary limit: quota left, no retry-after, GitHub's body
    retry_after: int | None = None
    html: bool = False
    redirect_loop: bool = False
    reset_after_bytes: int | None = None  # TCP reset after N body bytes
    truncate_after_bytes: int | None = None  # full Content-Length, N bytes, clean close
    extra_bytes: int = 0  # body longer than the asset's published size
    drip_seconds: float = 0.0  # pause between chunks of drip_chunk bytes
    drip_chunk: int = 1024
    ignore_range: bool = False
    wrong_bytes: bool = False
    short_by: int = 0  # a complete response (Content-Length agrees) N bytes short of the asset's size
    body: bytes | None = None  # a status fault's own JSON body (e.g. a deeply nested one)
    range_to_end: bool = False  # a Range answered to the end of the file (with an honest Content-Range)

    @property
    def is_body_fault(self) -> bool:
        return bool(
            self.short_by
            or self.reset_after_bytes is not None
            or self.truncate_after_bytes is not None
            or self.extra_bytes
            or self.drip_seconds
            or self.ignore_range
            or self.range_to_end
            or self.wrong_bytes
        )


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    host: str  # "api" or "blob"
    status: int = 0


#: What an asset's bytes come from: bytes, a file, or a zero-argument builder called on first need
#: (:meth:`FakeGitHub.materialise`), so a build of 36 stand-in archives costs only what a test reads.
AssetSource = bytes | Path | Callable[[], bytes]


@dataclass
class _Blob:
    name: str
    size: int
    data: bytes | None
    path: Path | None
    build: Callable[[], bytes] | None = None  # lazy: replaced by ``data`` once built

    def chunks(self, start: int, length: int | None = None) -> Iterator[bytes]:
        end = self.size if length is None else min(self.size, start + length)
        if self.data is not None:
            for i in range(start, end, _CHUNK):
                yield self.data[i : min(i + _CHUNK, end)]
            return
        assert self.path is not None
        with self.path.open("rb") as fh:
            fh.seek(start)
            left = end - start
            while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
                left -= len(chunk)
                yield chunk


def _parse_range(header: str) -> tuple[int, int | None] | None:
    """``bytes=N-`` or ``bytes=N-M`` (the forms downloaders send) → (N, M or None)."""
    if not header.startswith("bytes="):
        return None
    first, _, last = header[6:].partition("-")
    if not first.isdigit() or not (last == "" or last.isdigit()):
        return None
    start, end = int(first), int(last) if last else None
    return None if end is not None and end < start else (start, end)


@dataclass
class _Attestation:
    """One listed attestation: inline, or by ``bundle_url`` with the blob's bytes (``payload``)."""

    bundle: dict[str, Any]
    blob_id: int | None = None  # served by URL from the blob host
    payload: bytes = b""


def snappy_payload(bundle: dict[str, Any], framing: str = "block") -> bytes:
    """``bundle`` as GitHub's blob host serves it: snappy block (today), framed, or plain JSON.

    Real snappy from cramjam (the project's own decoder dependency), so the client's
    decoder is tested against a real compressor, not against its own inverse.
    """
    import cramjam

    raw = json.dumps(bundle).encode()
    if framing == "block":
        return bytes(cramjam.snappy.compress_raw(raw))
    if framing == "framed":
        return bytes(cramjam.snappy.compress(raw))
    if framing == "json":
        return raw
    raise ValueError(f"unknown snappy framing {framing!r}")


def release_attestation(repo: str, sha256: str, tag: str = "b7001") -> dict[str, Any]:
    """A stand-in for GitHub's release attestation of an asset (never verifiable: it is set aside by kind).

    Shaped like the real ones (a DSSE bundle whose statement is the release
    predicate, signed by GitHub's own ``RELEASE_SIGNER`` certificate, no
    transparency-log entry); the certificate bytes are a placeholder.
    """
    import base64

    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "asset", "digest": {"sha256": sha256}}],
        "predicateType": RELEASE_PREDICATE,
        "predicate": {"repository": repo, "tag": tag, "purl": f"pkg:github/{repo}@{tag}"},
    }
    return {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "certificate": {"rawBytes": base64.b64encode(f"placeholder for {RELEASE_SIGNER}".encode()).decode()},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(json.dumps(statement).encode()).decode(),
            "payloadType": "application/vnd.in-toto+json",
            "signatures": [{"sig": base64.b64encode(b"\0" * 70).decode()}],
        },
    }


@dataclass
class _Repo:
    releases: list[dict[str, Any]] = field(default_factory=list)
    private: bool = False
    versions_cut: int = 0  # semver releases v0.N.0 published so far
    cut_at: dict[str, str] = field(default_factory=dict)  # semver release -> the build it was cut at
    bare_tags: list[str] = field(default_factory=list)  # git tags with no release (yet)
    default_branch: str | None = None  # None: "master" for upstream, else "main" (see repository_json)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, fake: FakeGitHub, role: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake
        self.role = role

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-body are part of the tests, not errors."""


class FakeGitHub:
    """GitHub releases API + CDN on two local ports. Use as a context manager."""

    def __init__(
        self,
        scheme: str = "2026",
        token: str | None = None,
        *,
        rate_cap: int | None = None,
        auto_cut: bool = True,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        if scheme not in ("2026", "legacy"):
            raise ValueError(f"unknown publishing scheme {scheme!r}")
        self.scheme = scheme
        #: Scheme "2026": cut a ``v0.N.0`` for every upstream build added (the tidy default most
        #: tests rely on). ``False``: builds only; semver releases come from :meth:`cut_version`.
        self.auto_cut = auto_cut
        self.token = token  # the one token a private repository accepts
        self.requests: list[Request] = []
        self.download_bytes_sent = 0
        self.quota_used = 0  # primary-quota requests, counted as GitHub counts them
        #: Bytes per second each blob connection may send (``None``: unlimited), the
        #: way a slow CDN caps each connection rather than the client.
        self.rate_cap = rate_cap
        #: ``False``: ``git/matching-refs`` answers 404, as a proxy or forge that serves releases only.
        self.serves_refs = True
        self._repos: dict[str, _Repo] = {}
        self._attestations: dict[tuple[str, str], list[_Attestation]] = {}
        self._attestation_answers: dict[tuple[str, str], bytes] = {}  # a 200 body served as is
        self._attestation_blobs: dict[int, _Attestation] = {}
        self._blobs: dict[int, _Blob] = {}
        self._lazy: dict[int, bool] = {}  # asset id of a blob not built yet -> whether it publishes a digest
        self._assets: dict[int, dict[str, Any]] = {}
        self._faults: list[tuple[str, Fault]] = []
        self._next_id = 1000
        self._lock = threading.Lock()
        self._api = _Server(self, "api")
        self._blob = _Server(self, "blob")
        #: HTTPS with this certificate and key (both hosts), as github.com and its CDN serve.
        self._scheme = "https" if tls else "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            for srv in (self._api, self._blob):
                srv.socket = context.wrap_socket(srv.socket, server_side=True)
        self._threads: list[threading.Thread] = []

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeGitHub:
        for srv in (self._api, self._blob):
            thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for srv in (self._api, self._blob):
            srv.shutdown()
            srv.server_close()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self._api.server_address[1]}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/api"

    @property
    def blob_url(self) -> str:
        return f"{self._scheme}://localhost:{self._blob.server_address[1]}"

    # -- test setup ------------------------------------------------------------------------
    def add_release(
        self,
        repo: str,
        tag: str,
        assets: Mapping[str, AssetSource],
        *,
        digests: bool = True,
        draft: bool = False,
        prerelease: bool | None = None,
        published_at: str | None = None,
        state_overrides: dict[str, str] | None = None,
        stable: bool | None = None,
    ) -> dict[str, Any]:
        """Publish a release; returns its API JSON (also what the server serves).

        ``prerelease`` and ``stable`` default to the publishing scheme: in
        ``"2026"`` an upstream ``bNNNN`` build is a prerelease and, unless
        ``stable=False`` or ``prerelease=True`` is given, is cut as the next
        semver release ``v0.N.0`` (see :meth:`add_version`).
        With ``auto_cut=False`` only ``stable=True`` cuts one (else see :meth:`cut_version`).
        """
        modern = self.scheme == "2026" and repo in UPSTREAM_REPOS and _is_build_tag(tag)
        cut = modern and not draft and stable is not False and prerelease is not True
        cut = cut and (self.auto_cut or stable is True)
        release = self._publish(
            repo,
            tag,
            assets,
            digests=digests,
            draft=draft,
            prerelease=modern if prerelease is None else prerelease,
            published_at=published_at,
            state_overrides=state_overrides,
        )
        if cut:
            with self._lock:
                rel_repo = self._repos[repo]
                rel_repo.versions_cut += 1
                version = f"v0.{rel_repo.versions_cut}.0"
            self.add_version(repo, version, tag)
        return release

    def add_version(self, repo: str, version: str, build: str, *, content: bytes | None = None) -> dict[str, Any]:
        """Publish semver release ``version`` whose only asset, ``nightly-tag.txt``, names ``build``.

        Like make-release.yml + make-release-desc.sh (PR #27485): a non-prerelease
        release without binaries. ``content`` overrides the file (hostile tests).
        """
        body = content if content is not None else f"{build}\n".encode()
        return self._publish(repo, version, {NIGHTLY_TAG_ASSET: body}, digests=True, prerelease=False)

    def cut_version(
        self,
        repo: str,
        version: str,
        build: str,
        *,
        pointer: bool = True,
        content: bytes | None = None,
        served: bytes | None = None,
    ) -> dict[str, Any]:
        """Cut semver release ``version`` at build ``build`` by hand, as upstream does since August 2026.

        make-release.yml ("Make Release", ``workflow_dispatch`` with the commit to
        release; it refuses a commit older than 3 days, PR #27234) pushes the
        ``vX.Y.Z`` tag, **creates the release first** (``prerelease: false``, no
        assets: ``/releases/latest`` answers it from then on) and uploads
        ``nightly-tag.txt`` naming the build after that (PR #27485). When no ``b*``
        tag points at the release commit it prints "no nightly tag found for the
        release commit - nightly-tag.txt will not be created" and uploads nothing.
        Sources: shared/reference/upstream-2026-10.md ("Three workflows"),
        make-release.yml and scripts/make-release-desc.sh as in the ngxson/llama.cpp fork at 2026-08-22.

        Args:
            pointer: ``False`` stops after creating the release: the window in
                which the newest release names no build. :meth:`upload_pointer`
                ends it; a release whose commit has no build tag never gets one.
            content: What ``nightly-tag.txt`` holds (default ``build`` and a newline).
            served: Bytes the CDN serves instead, while the API publishes the size
                and digest of ``content`` (tampering only the digest can tell).
        """
        with self._lock:
            rel_repo = self._repos.setdefault(repo, _Repo())
            rel_repo.cut_at[version] = build
            if version in rel_repo.bare_tags:
                rel_repo.bare_tags.remove(version)  # the release now stands for the tag
        release = self._publish(repo, version, {}, prerelease=False)
        if pointer:
            self.upload_pointer(repo, version, content=content, served=served)
        return release

    def upload_pointer(
        self,
        repo: str,
        version: str,
        build: str | None = None,
        *,
        content: bytes | None = None,
        served: bytes | None = None,
        state: str = "uploaded",
    ) -> dict[str, Any]:
        """Attach ``nightly-tag.txt`` to the published release ``version`` (make-release.yml's last step).

        Args:
            build: The build it names (default: the one :meth:`cut_version` cut it at).
            content, served: As :meth:`cut_version` takes them.
            state: The asset's state; ``"open"`` while its upload runs.

        Returns:
            The asset's API JSON.
        """
        with self._lock:
            rel_repo = self._repos[repo]
            release = next(r for r in rel_repo.releases if r["tag_name"] == version)
            named = build or rel_repo.cut_at[version]
            body = content if content is not None else f"{named}\n".encode()
            asset = self._add_asset(repo, version, NIGHTLY_TAG_ASSET, body, True, state)
            if served is not None:
                self._blobs[asset["id"]] = _Blob(NIGHTLY_TAG_ASSET, len(served), served, None)
            release["assets"].append(asset)
            return asset

    def push_tag(self, repo: str, tag: str) -> None:
        """Push git tag ``tag`` without a release (make-release.yml pushes the tag, then creates the release)."""
        with self._lock:
            self._repos.setdefault(repo, _Repo()).bare_tags.append(tag)

    def set_private(self, repo: str) -> None:
        """Make ``repo`` private: only :attr:`token` sees it, downloads only through the API."""
        with self._lock:
            self._repos.setdefault(repo, _Repo()).private = True

    def set_default_branch(self, repo: str, branch: str) -> None:
        """What ``GET /repos/{owner}/{repo}`` answers as ``default_branch`` for ``repo``."""
        with self._lock:
            self._repos.setdefault(repo, _Repo()).default_branch = branch

    def repository_json(self, repo: str) -> dict[str, Any]:
        """The small repository object ``GET /repos/{owner}/{repo}`` serves.

        GitHub docs, "Get a repository" (REST, repos): the full object has ~90 keys;
        the client reads ``default_branch``. ggml-org/llama.cpp's is ``master`` (its
        workflows run ``on: push: branches: [master]``); other repositories get
        ``main``, GitHub's default for new repositories since October 2020.
        """
        rel_repo = self._repos.get(repo, _Repo())
        branch = rel_repo.default_branch or ("master" if repo in UPSTREAM_REPOS else "main")
        return {
            "id": 612354784,
            "name": repo.split("/", 1)[1],
            "full_name": repo,
            "private": rel_repo.private,
            "html_url": f"{self.base_url}/{repo}",
            "url": f"{self.api_url}/repos/{repo}",
            "default_branch": branch,
        }

    def latest_version(self, repo: str) -> str | None:
        """The tag ``/releases/latest`` answers now (for assertions)."""
        stable = [r for r in self._repos.get(repo, _Repo()).releases if not r["draft"] and not r["prerelease"]]
        return stable[-1]["tag_name"] if stable else None

    def _publish(
        self,
        repo: str,
        tag: str,
        assets: Mapping[str, AssetSource],
        *,
        digests: bool = True,
        draft: bool = False,
        prerelease: bool = False,
        published_at: str | None = None,
        state_overrides: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        states = state_overrides or {}
        with self._lock:
            rel_repo = self._repos.setdefault(repo, _Repo())
            order = len(rel_repo.releases)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_750_000_000 + order * 3600))
            release_id = self._new_id()
            asset_json = [
                self._add_asset(repo, tag, name, src, digests, states.get(name, "uploaded"))
                for name, src in assets.items()
            ]
            release: dict[str, Any] = {
                "url": f"{self.api_url}/repos/{repo}/releases/{release_id}",
                "html_url": f"{self.base_url}/{repo}/releases/tag/{tag}",
                "id": release_id,
                "tag_name": tag,
                "name": tag,
                "draft": draft,
                "prerelease": prerelease,
                "immutable": False,
                "created_at": stamp,
                "published_at": published_at or stamp,
                "body": "",
                "assets": asset_json,
            }
            rel_repo.releases.append(release)
            return release

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _add_asset(self, repo: str, tag: str, name: str, src: AssetSource, digests: bool, state: str) -> dict[str, Any]:
        asset_id = self._new_id()
        if isinstance(src, bytes):
            blob = _Blob(name, len(src), src, None)
        elif isinstance(src, Path):
            blob = _Blob(name, src.stat().st_size, None, src)
        else:
            blob = _Blob(name, 0, None, None, build=src)
        sha = hashlib.sha256()
        for chunk in blob.chunks(0) if blob.build is None else ():  # a lazy blob's digest comes when it is built
            sha.update(chunk)
        self._blobs[asset_id] = blob
        self._assets[asset_id] = asset = {
            "url": f"{self.api_url}/repos/{repo}/releases/assets/{asset_id}",
            "id": asset_id,
            "name": name,
            "label": "",
            "state": state,
            "content_type": "application/octet-stream",
            "size": blob.size,
            "digest": f"sha256:{sha.hexdigest()}" if digests and blob.build is None else None,
            "download_count": 0,
            "browser_download_url": f"{self.base_url}/dl/{repo}/releases/download/{tag}/{name}",
        }
        if blob.build is not None:
            self._lazy[asset_id] = digests
        return asset

    def materialise(self, asset: dict[str, Any]) -> dict[str, Any]:
        """Build a lazily given asset now (its bytes, ``size`` and ``digest``); returns the asset's JSON.

        The server calls it before it serves an asset's JSON or bytes, so a client
        never sees a lazy asset's placeholder size; tests call it for a digest.
        """
        with self._lock:
            return self._materialise_locked(asset)

    def _materialise_locked(self, asset: dict[str, Any]) -> dict[str, Any]:
        asset_id = asset["id"]
        if asset_id not in self._lazy:
            return asset
        blob = self._blobs[asset_id]
        assert blob.build is not None
        blob.data, blob.build = blob.build(), None
        blob.size = len(blob.data)
        asset["size"] = blob.size
        if self._lazy.pop(asset_id):
            asset["digest"] = f"sha256:{hashlib.sha256(blob.data).hexdigest()}"
        return asset

    def _materialise_payload(self, payload: Any) -> None:
        """Build every lazy asset a release, a release list or an asset JSON about to be served holds."""
        items = payload if isinstance(payload, list) else [payload]
        with self._lock:
            for item in items:
                if isinstance(item, dict) and "tag_name" in item:
                    for asset in item["assets"]:
                        self._materialise_locked(asset)
                elif isinstance(item, dict) and "id" in item:
                    self._materialise_locked(item)

    def add_attestation(
        self,
        repo: str,
        sha256: str,
        bundle: dict[str, Any],
        *,
        by_url: bool = False,
        framing: str = "block",
        payload: bytes | None = None,
    ) -> str | None:
        """Publish a Sigstore ``bundle`` for the file ``sha256`` in ``repo`` (the attestations API).

        Served as GitHub does (docs.github.com, "List attestations", repos):
        ``GET /repos/{owner}/{repo}/attestations/sha256:{hex}`` answers
        ``{"attestations": [{"bundle": …, "repository_id": …, "bundle_url": …}]}``;
        a digest with none answers 404. With ``by_url`` the entry is
        ``{"bundle": null, "bundle_url": "<blob host>/attestations/….json.sn?<SAS>"}``
        and the blob host serves the bundle compressed as ``framing`` says
        (:func:`snappy_payload`), or ``payload`` exactly (hostile tests).

        Returns:
            The blob's path on the blob host when served by URL (a fault key), else ``None``.
        """
        with self._lock:
            entry = _Attestation(bundle)
            if by_url:
                entry.blob_id = self._new_id()
                entry.payload = snappy_payload(bundle, framing) if payload is None else payload
                self._attestation_blobs[entry.blob_id] = entry
            self._attestations.setdefault((repo, sha256), []).append(entry)
        return None if entry.blob_id is None else f"/attestations/{entry.blob_id}.json.sn"

    def add_release_attestation(self, repo: str, sha256: str, *, by_url: bool = False) -> None:
        """List GitHub's release attestation (an immutable release's) for ``sha256`` beside any other."""
        self.add_attestation(repo, sha256, release_attestation(repo, sha256), by_url=by_url)

    def drop_attestations(self, repo: str, sha256: str) -> None:
        """Stop listing any attestation for the file ``sha256`` in ``repo`` (it answers 404 again)."""
        with self._lock:
            self._attestations.pop((repo, sha256), None)

    def set_attestations_answer(self, repo: str, sha256: str, answer: object) -> None:
        """Answer the attestations of ``sha256`` with 200 and ``answer`` as JSON, whatever its shape."""
        with self._lock:
            self._attestation_answers[(repo, sha256)] = json.dumps(answer).encode()

    def bundle_url(self, blob_id: int) -> str:
        """The pre-signed URL of an attestation blob (an Azure SAS query, as tflint PR #2593 shows)."""
        return f"{self.blob_url}/attestations/{blob_id}.json.sn?{_SAS_QUERY}"

    def inject(self, key: str, fault: Fault) -> None:
        """Misbehave on requests whose path is ``key`` or ends with ``/key`` (an asset name)."""
        with self._lock:
            self._faults.append((key, fault))

    def requests_to(self, host: str, contains: str = "") -> list[Request]:
        """Logged requests to ``host`` ("api" or "blob") whose path contains ``contains``."""
        return [r for r in self.requests if r.host == host and contains in r.path]

    def _take_fault(self, path: str, kinds: set[str]) -> Fault | None:
        with self._lock:
            for key, fault in self._faults:
                if not (path == key or path.endswith("/" + key)):
                    continue
                kind = "redirect" if fault.redirect_loop else "body" if fault.is_body_fault else "status"
                if kind not in kinds:
                    continue
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove((key, fault))
                return fault
        return None


def _is_build_tag(tag: str) -> bool:
    return len(tag) > 1 and tag[0] == "b" and tag[1:].isdigit()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server  # pyright: ignore[reportIncompatibleVariableOverride] - ours is always a _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is :attr:`FakeGitHub.requests`."""

    def do_GET(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        record = Request(
            "GET",
            parts.path,
            parts.query,
            {k.lower(): v for k, v in self.headers.items()},
            self.server.role,
        )
        with fake._lock:
            fake.requests.append(record)
        self._record = record
        try:
            self._route(fake, parts.path, parse_qs(parts.query))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- plumbing --------------------------------------------------------------------------
    def _head(self, status: int, headers: dict[str, str]) -> None:
        self._record.status = status
        if self.server.role == "api" and self._record.path.startswith("/api/"):
            # GitHub: a 304 does not count "if ... correctly authorized with an Authorization header".
            free = status == 304 and "authorization" in self._record.headers
            if not free:
                with self.server.fake._lock:
                    self.server.fake.quota_used += 1
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _simple(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self._head(status, {"Content-Type": ctype, "Content-Length": str(len(body)), **(extra or {})})
        self.wfile.write(body)

    def _route(self, fake: FakeGitHub, path: str, query: dict[str, list[str]]) -> None:
        fault = fake._take_fault(path, {"status", "redirect"})
        if fault is not None and fault.redirect_loop:
            self._head(302, {"Location": self.path, "Content-Length": "0"})
            return
        if fault is not None:
            self._status_fault(fault)
            return
        if self.server.role == "blob" and path.startswith("/attestations/"):
            self._serve_attestation_blob(fake, path)
        elif self.server.role == "blob":
            self._serve_blob(fake, path)
        elif path.startswith("/dl/"):
            self._serve_redirect(fake, path)
        elif path.startswith("/api/repos/"):
            self._serve_api(fake, path, query)
        else:
            self._simple(404, b'{"message":"Not Found"}', "application/json")

    def _status_fault(self, fault: Fault) -> None:
        if fault.html:
            body = b"<!DOCTYPE html><html><body>Unicorn! We're having trouble.</body></html>"
            self._simple(fault.status or 200, body, "text/html; charset=utf-8")
            return
        extra = self._rate_headers(0 if fault.rate_limited else 42)
        if fault.retry_after is not None:
            extra["Retry-After"] = str(fault.retry_after)
        body = _RATE_LIMIT_BODY if fault.rate_limited else b'{"message":"Server Error"}'
        if fault.secondary:
            body = _SECONDARY_LIMIT_BODY
        if fault.body is not None:
            body = fault.body
        self._simple(fault.status or 500, body, "application/json; charset=utf-8", extra)

    def _rate_headers(self, remaining: int) -> dict[str, str]:
        limit = 5000 if "authorization" in self._record.headers else 60
        return {
            "x-ratelimit-limit": str(limit),
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-used": str(limit - remaining),
            "x-ratelimit-reset": str(int(time.time()) + 1800),
            "x-ratelimit-resource": "core",
        }

    # -- API -------------------------------------------------------------------------------
    def _authorised(self, fake: FakeGitHub) -> bool:
        return fake.token is not None and self._record.headers.get("authorization") == f"Bearer {fake.token}"

    def _serve_api(self, fake: FakeGitHub, path: str, query: dict[str, list[str]]) -> None:
        bits = path.split("/")  # ["", "api", "repos", o, r, "releases", ...]
        if len(bits) == 7 and bits[5] == "attestations":
            self._serve_attestations(fake, f"{bits[3]}/{bits[4]}", bits[6])
            return
        repo = fake._repos.get(f"{bits[3]}/{bits[4]}") if len(bits) > 5 else None
        if repo is not None and repo.private and not self._authorised(fake):
            repo = None  # GitHub hides a private repository behind 404, not 403
        public = [r for r in repo.releases if not r["draft"]] if repo else []
        payload: Any = None
        link = ""
        if len(bits) == 5 and f"{bits[3]}/{bits[4]}" in fake._repos:  # GET /repos/{owner}/{repo}
            known = fake._repos[f"{bits[3]}/{bits[4]}"]
            if not known.private or self._authorised(fake):
                payload = fake.repository_json(f"{bits[3]}/{bits[4]}")
        elif len(bits) >= 8 and bits[5:7] == ["git", "matching-refs"] and repo is not None and fake.serves_refs:
            payload = self._matching_refs(fake, f"{bits[3]}/{bits[4]}", repo, "/".join(bits[7:]))
        elif len(bits) == 8 and bits[6] == "assets" and repo is not None and bits[7].isdigit():
            asset = next((a for r in public for a in r["assets"] if a["id"] == int(bits[7])), None)
            if asset is not None and self._record.headers.get("accept") == "application/octet-stream":
                # docs "REST API endpoints for release assets": 302 to the signed CDN URL.
                self._head(302, {"Location": self._signed_url(fake, asset), "Content-Length": "0"})
                return
            payload = asset
        elif len(bits) == 8 and bits[6] == "tags":
            # "_served_for": a hostile server answering tags/T with another release.
            payload = next((r for r in public if r.get("_served_for", r["tag_name"]) == bits[7]), None)
        elif len(bits) == 7 and bits[6] == "latest":
            stable = [r for r in public if not r["prerelease"]]
            payload = stable[-1] if stable else None
        elif len(bits) == 6 and bits[5] == "releases" and repo is not None:
            per_page = min(int(query.get("per_page", ["30"])[0]), 100)
            page = int(query.get("page", ["1"])[0])
            newest_first = list(reversed(public))
            payload = newest_first[(page - 1) * per_page : page * per_page]
            last = max(1, -(-len(newest_first) // per_page))
            base = f"{fake.api_url}{path[len('/api') :]}?per_page={per_page}"
            if page < last:
                link = f'<{base}&page={page + 1}>; rel="next", <{base}&page={last}>; rel="last"'
        if payload is None:
            # A 404 counts against the quota and carries the x-ratelimit-* headers like every API answer
            # (GitHub docs "Rate limits for the REST API": "the headers that are sent with each response";
            # shared/reference/github_api.md). The client tells GitHub from a static mirror by them.
            self._simple(404, _NOT_FOUND_BODY, "application/json; charset=utf-8", self._rate_headers(41))
            return
        fake._materialise_payload(payload)
        body = json.dumps(payload).encode()
        etag = 'W/"' + hashlib.sha1(body).hexdigest() + '"'
        headers = {"ETag": etag, **self._rate_headers(59)}
        if link:
            headers["Link"] = link
        if self._record.headers.get("if-none-match") == etag:
            self._head(304, headers)
            return
        fault = fake._take_fault(path, {"body"})
        self._send_body(fault, [body], len(body), 200, {**headers, "Content-Type": "application/json"})

    @staticmethod
    def _matching_refs(fake: FakeGitHub, name: str, repo: _Repo, prefix: str) -> list[dict[str, Any]]:
        """``GET /repos/{o}/{r}/git/matching-refs/{prefix}`` (docs.github.com, "List matching references").

        Every ref starting with ``refs/<prefix>``, in git's (name) order; ``[]`` when none
        does. The tags are the published releases' plus bare ones (:meth:`FakeGitHub.push_tag`).
        """
        tags = {r["tag_name"] for r in repo.releases if not r["draft"]} | set(repo.bare_tags)
        refs = sorted(f"refs/tags/{tag}" for tag in tags if f"refs/tags/{tag}".startswith(f"refs/{prefix}"))
        return [
            {
                "ref": ref,
                "node_id": "REF_" + hashlib.sha1(ref.encode()).hexdigest()[:16],
                "url": f"{fake.api_url}/repos/{name}/git/{ref}",
                "object": {
                    "sha": hashlib.sha1(ref.encode()).hexdigest(),
                    "type": "commit",
                    "url": f"{fake.api_url}/repos/{name}/git/commits/{hashlib.sha1(ref.encode()).hexdigest()}",
                },
            }
            for ref in refs
        ]

    def _serve_attestations(self, fake: FakeGitHub, repo: str, subject: str) -> None:
        digest = subject.removeprefix("sha256:")
        listed = fake._attestations.get((repo, digest), [])
        verbatim = fake._attestation_answers.get((repo, digest))
        if verbatim is not None:
            self._simple(200, verbatim, "application/json; charset=utf-8", self._rate_headers(58))
            return
        if not subject.startswith("sha256:") or not listed:
            body = b'{"message":"Not Found","documentation_url":"https://docs.github.com/rest/repos/attestations"}'
            self._simple(404, body, "application/json; charset=utf-8", self._rate_headers(40))
            return
        entries = [
            {"bundle": None, "repository_id": 612354784, "bundle_url": fake.bundle_url(a.blob_id), "initiator": "user"}
            if a.blob_id is not None
            else {"bundle": a.bundle, "repository_id": 612354784, "bundle_url": None}
            for a in listed
        ]
        body = json.dumps({"attestations": entries}).encode()
        self._simple(200, body, "application/json; charset=utf-8", self._rate_headers(58))

    def _serve_attestation_blob(self, fake: FakeGitHub, path: str) -> None:
        """A pre-signed attestation blob: no Authorization accepted, the right signature required."""
        name = path.removeprefix("/attestations/").removesuffix(".json.sn")
        entry = fake._attestation_blobs.get(int(name)) if name.isdigit() else None
        if entry is None or BUNDLE_URL_SIGNATURE not in self._record.query:
            self._simple(403 if entry else 404, b"<Error><Code>AuthenticationFailed</Code></Error>", "application/xml")
            return
        if "authorization" in self._record.headers:
            body = b"<Error><Code>InvalidAuthenticationInfo</Code><Message>Only one auth mechanism</Message></Error>"
            self._simple(400, body, "application/xml")
            return
        fault = fake._take_fault(path, {"body"})
        headers = {"Content-Type": "application/x-snappy", "ETag": f'"0x8DE{entry.blob_id:012X}"'}
        self._send_body(fault, [entry.payload], len(entry.payload), 200, headers)

    # -- downloads -------------------------------------------------------------------------
    def _serve_redirect(self, fake: FakeGitHub, path: str) -> None:
        bits = path.split("/")  # ["", "dl", o, r, "releases", "download", tag, name]
        repo = fake._repos.get(f"{bits[2]}/{bits[3]}") if len(bits) == 8 else None
        if repo is not None and repo.private:
            repo = None  # browser_download_url of a private repository does not take a token
        for release in repo.releases if repo else []:
            if release["tag_name"] != bits[6]:
                continue
            for asset in release["assets"]:
                if asset["name"] == bits[7]:
                    self._head(302, {"Location": self._signed_url(fake, asset), "Content-Length": "0"})
                    return
        self._simple(404, b"Not Found", "text/plain")

    @staticmethod
    def _signed_url(fake: FakeGitHub, asset: dict[str, Any]) -> str:
        return f"{fake.blob_url}/blob/{asset['id']}/{asset['name']}?X-Amz-Expires=300&X-Amz-Signature=f00d"

    def _serve_blob(self, fake: FakeGitHub, path: str) -> None:
        bits = path.split("/")  # ["", "blob", id, name]
        blob = fake._blobs.get(int(bits[2])) if len(bits) == 4 and bits[2].isdigit() else None
        if blob is None:
            self._simple(404, b"<Error><Code>NoSuchKey</Code></Error>", "application/xml")
            return
        fake.materialise(fake._assets[int(bits[2])])
        if "authorization" in self._record.headers:
            # octokit/octokit.js #967: the signed URL and a token together are refused.
            body = b"<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed</Message></Error>"
            self._simple(400, body, "application/xml")
            return
        with fake._lock:
            fake._assets[int(bits[2])]["download_count"] += 1  # changes the release JSON, so its ETag
        fault = fake._take_fault(path, {"body"})
        wanted = self._record.headers.get("range", "")
        span = _parse_range(wanted) if not (fault and fault.ignore_range) else None
        start, wanted_last = span if span is not None else (0, None)
        if fault and fault.range_to_end:
            wanted_last = None
        if span is not None and start >= blob.size:
            self._simple(416, b"", "application/xml", {"Content-Range": f"bytes */{blob.size}"})
            return
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": f'"{hashlib.md5(str(bits[2]).encode()).hexdigest()}"',  # S3: strong, per upload
            "Last-Modified": _LAST_MODIFIED,
        }
        status = 200
        end = blob.size - (fault.short_by if fault else 0)
        last = end - 1 if wanted_last is None else min(wanted_last, end - 1)
        # S3 (GitHub's asset CDN) answers any Range, even "bytes=0-", with 206.
        if span is not None:
            status = 206
            headers["Content-Range"] = f"bytes {start}-{last}/{blob.size}"
        length = last + 1 - start
        self._send_body(fault, blob.chunks(start, length), length, status, headers, counts=True)

    def _send_body(
        self,
        fault: Fault | None,
        chunks: Iterator[bytes] | list[bytes],
        length: int,
        status: int,
        headers: dict[str, str],
        *,
        counts: bool = False,
    ) -> None:
        f = fault or Fault(times=None)
        self._head(status, {**headers, "Content-Length": str(length + f.extra_bytes)})
        stop_at = min(x for x in (f.reset_after_bytes, f.truncate_after_bytes, 1 << 62) if x is not None)
        sent = 0
        pace = _Pacer(self.server.fake.rate_cap if counts else None)
        for chunk in self._body_pieces(chunks, f, small=pace.cap is not None):
            pace.wait(sent)
            piece = chunk[: max(0, stop_at - sent)]
            if piece:
                self.wfile.write(piece)
                self.wfile.flush()
                sent += len(piece)
                if counts:
                    with self.server.fake._lock:
                        self.server.fake.download_bytes_sent += len(piece)
            if sent >= stop_at:
                break
            if f.drip_seconds:
                time.sleep(f.drip_seconds)
        if f.reset_after_bytes is not None and sent >= stop_at:
            # SO_LINGER 0 makes close() send RST: the client sees a reset, not a clean EOF.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        elif f.truncate_after_bytes is not None and sent >= stop_at:
            self.close_connection = True

    @staticmethod
    def _body_pieces(chunks: Iterator[bytes] | list[bytes], f: Fault, *, small: bool = False) -> Iterator[bytes]:
        step = f.drip_chunk if f.drip_seconds else _PACED_CHUNK if small else 0
        for chunk in chunks:
            data = chunk.translate(_INVERT) if f.wrong_bytes else chunk
            if step:
                for i in range(0, len(data), step):
                    yield data[i : i + step]
            else:
                yield data
        if f.extra_bytes:
            yield b"\0" * f.extra_bytes


# Pieces a rate-capped connection sends at a time: small enough that the rate is
# smooth within a fraction of a second.
_PACED_CHUNK = 16 * 1024


class _Pacer:
    """Keeps one connection at or under ``cap`` bytes per second (``None``: no cap)."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.start = time.monotonic()

    def wait(self, sent: int) -> None:
        if self.cap is None:
            return
        ahead = sent / self.cap - (time.monotonic() - self.start)
        if ahead > 0:
            time.sleep(ahead)
