"""A small OCI distribution-spec v1.1 client on httpx: manifests, blobs, referrers, tags, auth.

Chosen over PyPI ``oras``: that brings ``requests`` (and ``jsonschema``) beside
the httpx the updater already uses, costs start-up time, and has no referrers
listing; what is needed here is a few hundred lines of the spec.

Spec sections followed (opencontainers/distribution-spec ``spec.md``, v1.1):
"Pulling manifests" / "Pulling blobs" (GET/HEAD ``/v2/<name>/manifests/<ref>``
and ``/blobs/<digest>``), "Pushing blobs" (POST then PUT ``?digest=``:
monolithic; POST, PATCH with ``Content-Range``, PUT: chunked; ``?mount=&from=``:
cross-repository mount), "Pushing manifests" (the ``OCI-Subject`` header),
"Listing referrers" (``/v2/<name>/referrers/<digest>``; a 404 there means the
API is unavailable, and "Backwards Compatibility / Unavailable Referrers API"
defines the referrers tag schema: an index tagged ``<alg>-<hex>``), "Listing tags"
(``/tags/list`` with ``n``/``last`` and the ``Link`` header).

Invariants:
    * Every blob and manifest read is checked against its digest before it is
      used, and read with a size cap; a manifest must come back with one of the
      media types asked for.
    * Every request goes through the one network layer (:mod:`updater.net`): its
      redirects, retries, ``Retry-After``, caps, deadline, TLS hint and User-Agent.
    * Credentials are bound to an origin: Basic and bearer tokens to the registry's
      own, Basic to the token realm only when the registry's own 401 named it; never
      to a redirect's host, never in clear text over a network.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urljoin

import httpx

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock, TimeBudget
from llama_runtime.runtime.errors import DigestMismatchError, NetworkError, RemoteDataError, RemoteError
from llama_runtime.runtime.fsutil import DamagedRecordError, read_record, write_record
from llama_runtime.updater.net.body import MAX_ERROR_BODY_BYTES
from llama_runtime.updater.net.limits import rate_limit_refusal
from llama_runtime.updater.net.origin import may_carry_credentials, origin_of, same_origin
from llama_runtime.updater.net.session import OriginCredential, Session
from llama_runtime.updater.release.remote_json import loads_bounded
from llama_runtime.updater.sources.oci.auth import (
    Credential,
    RegistryAuthError,
    TokenCache,
    basic_header,
    parse_challenge,
)
from llama_runtime.updater.sources.oci.reference import Reference

__all__ = [
    "INDEX_MEDIA_TYPE",
    "MANIFEST_MEDIA_TYPE",
    "Descriptor",
    "Manifest",
    "RegistryClient",
    "referrers_tag",
    "sha256_digest",
]

MANIFEST_MEDIA_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE: Final = "application/vnd.oci.image.index.v1+json"
_MANIFEST_ACCEPT: Final = f"{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}"
#: Largest manifest read or written (bytes): distribution-spec asks registries to accept
#: at least 4 MiB; a build's manifest with ~50 layers is ~15 KB.
MAX_MANIFEST_BYTES: Final[int] = 4 * 1024 * 1024
#: Deepest JSON nesting a manifest may have: image-spec manifests are 4 levels deep.
MAX_MANIFEST_DEPTH: Final[int] = 16
#: Blobs up to this size are pushed in one PUT; larger ones in PATCH chunks (bytes).
MONOLITHIC_MAX_BYTES: Final[int] = 16 * 1024 * 1024
#: One PATCH's size (bytes): a failed chunk costs at most this much to send again.
CHUNK_BYTES: Final[int] = 16 * 1024 * 1024
#: How many times an interrupted chunked upload is resumed from the registry's offset.
MAX_UPLOAD_RESUMES: Final[int] = 3
#: Largest token answer read (bytes): a JWT of a few KB; read while it streams, never whole first.
MAX_TOKEN_BYTES: Final[int] = MAX_ERROR_BODY_BYTES
#: Tag list pages followed (``n`` per page): a repository with 100,000 tags is not walked.
MAX_TAG_PAGES: Final[int] = 100
TAGS_PER_PAGE: Final[int] = 1000


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag for ``digest`` (``sha256:abc`` -> ``sha256-abc``)."""
    return digest.replace(":", "-", 1)


@dataclass(frozen=True)
class Descriptor:
    """An image-spec descriptor: what a manifest, index or HEAD says about content."""

    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    annotations: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The descriptor as image-spec JSON."""
        doc: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            doc["artifactType"] = self.artifact_type
        if self.annotations:
            doc["annotations"] = dict(self.annotations)
        return doc


@dataclass(frozen=True)
class Manifest:
    """A manifest or index as read: its exact bytes, digest, media type and decoded JSON."""

    raw: bytes
    digest: str
    media_type: str
    doc: dict[str, Any]


def parse_descriptor(value: object, where: str) -> Descriptor:
    """``value`` as a :class:`Descriptor`, checked (raises ``RemoteDataError``)."""
    if not isinstance(value, dict):
        raise RemoteDataError(f"{where} holds a descriptor that is not an object.")
    digest, size, media = value.get("digest"), value.get("size"), value.get("mediaType")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
        raise RemoteDataError(f"{where} holds a descriptor without a sha256 digest.")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RemoteDataError(f"{where} holds a descriptor without a size.")
    artifact = value.get("artifactType")
    notes = value.get("annotations")
    annotations = {str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict) else None
    return Descriptor(
        str(media) if isinstance(media, str) else "",
        digest,
        size,
        artifact if isinstance(artifact, str) else None,
        annotations,
    )


class RegistryClient:
    """One repository of one registry, spoken to as the distribution-spec says.

    Every request goes through the one network layer (:class:`~updater.net.session.Session`):
    its redirects, retries, ``Retry-After``, caps, deadline, TLS hint and User-Agent are the
    GitHub client's too. What is the registry's own is the auth dance: a challenge is answered only
    when the registry's own origin asked, and each credential is bound to the origin it is for.

    Args:
        ref: The repository.
        http: The connection pool (timeouts, TLS); the caller closes it.
        credential: Sent to the registry (Basic) or its token realm (bearer flow); ``None``: anonymous.
        budget: The command's one overall deadline for requests (default: none).
        sleep: The wait between tries (a fake clock's in tests).
        clock: Where deadlines and ``Retry-After`` dates read time.
        tokens: Where bearer tokens are kept until they expire (the home's cache), if anywhere.
    """

    def __init__(
        self,
        ref: Reference,
        http: httpx.Client,
        credential: Credential | None = None,
        *,
        budget: TimeBudget | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Clock = SYSTEM_CLOCK,
        tokens: TokenCache | None = None,
    ) -> None:
        self.ref = ref
        self.http = http
        self.net = Session(http, who=f"the registry {ref.host}", budget=budget, sleep=sleep, clock=clock)
        self._clock = clock
        self._credential = credential
        self._token_cache = tokens
        self._tokens: dict[str, str] = {}  # scope -> token (this process)
        # What the last challenge earned, bound to the registry's origin. A token earned by an earlier run
        # (still valid), else Basic when there is a credential, goes first: one request per check, not a
        # 401 and a retry. The origin binding keeps either off every other host and off plain HTTP.
        cached = tokens.get(self._cache_key()) if tokens is not None else None
        first = f"Bearer {cached}" if cached else basic_header(credential) if credential is not None else None
        self._authorization: OriginCredential | None = OriginCredential(self.origin, first) if first else None

    # -- requests -------------------------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` of the registry."""
        return self.ref.base_url

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """The ``Authorization`` header ``url`` may carry: only the registry's own origin gets one."""
        return self._authorization.auth_headers_for(url) if self._authorization is not None else {}

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        stream: bool = False,
        repeatable: bool | None = None,
    ) -> httpx.Response:
        """Send one request through the network layer, answering the registry's auth challenge once.

        Raises:
            RegistryAuthError: 401 after the credentials were offered, 403, a challenge from
                another origin, or credentials the channel may not carry.
            RateLimitError: The registry (or its CDN) refused for its rate limit (429; 403 with
                ``Retry-After``) longer than the deadline may wait.
            NetworkError: The registry could not be reached, or kept failing with 5xx.
            RemoteError: A redirect loop, or a redirect from HTTPS to plain HTTP.
        """

        def send() -> httpx.Response:
            return self.net.send(
                method,
                url,
                headers=headers or {},
                content=content,
                stream=stream,
                credentials=self._authorization,
                repeatable=repeatable,
            )

        response = send()
        if response.status_code == 401 and self._answer_challenge(response):
            response.close()
            response = send()
        self._refuse_unusable(method, response)
        return response

    def read(self, url: str, cap: int, what: str, *, accept: str | None = None) -> tuple[httpx.Response, bytes]:
        """A GET's (closed) answer and its body, read under ``cap``; the auth challenge answered once.

        A transfer that breaks off mid-body is tried again, as a failed connection is.

        Raises:
            RemoteDataError: The body is larger than ``cap``.
            RegistryAuthError, RateLimitError, NetworkError, RemoteError: As :meth:`request`.
        """
        headers = {"Accept": accept} if accept else {}
        response, body = self.net.fetch(url, headers=headers, credentials=self._authorization, cap=cap, what=what)
        if response.status_code == 401 and self._answer_challenge(response):
            response, body = self.net.fetch(url, headers=headers, credentials=self._authorization, cap=cap, what=what)
        self._refuse_unusable("GET", response)
        return response, body

    def _refuse_unusable(self, method: str, response: httpx.Response) -> None:
        """Raise what a refusal means (auth, rate limit, a server that kept failing); else return."""
        status = response.status_code
        if status < 400 or status == 404:
            return
        limited = rate_limit_refusal(response, f"The registry {self.ref.host}", self._clock)
        if limited is not None:
            response.close()
            raise limited
        if status == 401:
            response.close()
            who = f"the credential from {self._credential.origin}" if self._credential else "anonymous access"
            raise RegistryAuthError(
                f"The registry {self.ref.host} refused {who} for {self.ref.name} (HTTP 401).",
                hint="Log in as container tools do (docker login / podman login), or set "
                "LLAMA_RUNTIME_REGISTRY_USERNAME and LLAMA_RUNTIME_REGISTRY_PASSWORD.",
            )
        if status == 403:
            response.close()
            raise RegistryAuthError(
                f"The registry {self.ref.host} denied {method} on {self.ref.name} (HTTP 403): "
                "the credential lacks that permission."
            )
        if status >= 500:
            response.close()
            raise NetworkError(
                f"The registry {self.ref.host} kept failing with HTTP {status} after {self.net.attempts} attempts; "
                "try again later."
            )

    def _answer_challenge(self, response: httpx.Response) -> bool:
        """Earn the authorization the 401 asks for; whether there is something new to retry with.

        Only the registry's own 401 is answered: one from a redirect's host (a CDN) names a realm
        the registry never vouched for, and the credential is not offered there.
        """
        if not same_origin(str(response.url), self.origin):
            response.close()
            raise RegistryAuthError(
                f"A redirect of the registry {self.ref.host} led to {origin_of(str(response.url))}, "
                "which asked for credentials (HTTP 401); they are only sent to the registry itself."
            )
        challenge = parse_challenge(response.headers.get("www-authenticate", ""))
        if challenge is None:
            return False
        if challenge.scheme == "basic":
            if self._credential is None:
                return False
            self._refuse_cleartext(self.origin)
            fresh = OriginCredential(self.origin, basic_header(self._credential))
            changed = fresh != self._authorization
            self._authorization = fresh
            return changed
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            return False
        if self._credential is not None:
            self._refuse_cleartext(self.origin)  # a token earned with it would cross the network in clear
        scope = challenge.params.get("scope", "")
        token = self._tokens.get(scope) or self._fetch_token(challenge.params)
        self._tokens[scope] = token
        fresh = OriginCredential(self.origin, f"Bearer {token}")
        changed = fresh != self._authorization
        self._authorization = fresh
        return changed

    def _refuse_cleartext(self, url: str) -> None:
        """Refuse to send the credential to ``url`` over plain HTTP on a network (exit 7, saying so)."""
        if not may_carry_credentials(url):
            raise RegistryAuthError(
                f"The registry {self.ref.host} asks for credentials at {origin_of(url)}, which is plain HTTP "
                "on a network; they are never sent in clear text.",
                hint="Use an https:// registry (oci://), or a registry on this machine for plain HTTP.",
            )

    def _realm_url(self, params: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        realm = str(params["realm"])
        scheme = origin_of(realm).scheme
        if scheme not in ("https", "http") or (scheme == "http" and not self.ref.plain_http):
            raise RegistryAuthError(f"The registry {self.ref.host} names a token realm that is not HTTPS: {realm!r}.")
        if self._credential is not None:
            self._refuse_cleartext(realm)
        query = {k: str(params[k]) for k in ("service", "scope") if params.get(k)}
        return (f"{realm}?{urlencode(query)}" if query else realm), query

    def _cache_key(self) -> str:
        """The repository and the credential a cached token was earned with (a digest: no secret is stored)."""
        who = basic_header(self._credential) if self._credential is not None else "anonymous"
        return hashlib.sha256(f"{self.ref.repository_url}\n{who}".encode()).hexdigest()

    def _fetch_token(self, params: Mapping[str, str]) -> str:
        url, query = self._realm_url(params)
        # The Basic credential goes to the realm the registry's own 401 named, and nowhere it redirects.
        basic = OriginCredential(url, basic_header(self._credential)) if self._credential else None
        answer, body = self.net.fetch(url, credentials=basic, cap=MAX_TOKEN_BYTES, what="a registry token")
        limited = rate_limit_refusal(answer, f"The token service of {self.ref.host}", self._clock)
        if limited is not None:
            raise limited
        if answer.status_code in (401, 403):
            raise RegistryAuthError(
                f"The token service of {self.ref.host} refused "
                f"{'the credential' if self._credential else 'an anonymous token'} for scope "
                f"{query.get('scope', '(none)')!r} (HTTP {answer.status_code})."
            )
        try:
            data = loads_bounded(body, what="a registry token")
            token = data.get("token") or data.get("access_token")
            expires = data.get("expires_in")
        except (ValueError, AttributeError):
            token, expires = None, None
        if answer.status_code != 200 or not isinstance(token, str) or not token:
            raise RegistryAuthError(f"The token service of {self.ref.host} gave no token (HTTP {answer.status_code}).")
        if self._token_cache is not None:
            lifetime = expires if isinstance(expires, int) and not isinstance(expires, bool) else None
            self._token_cache.put(self._cache_key(), token, lifetime)
        return token

    # -- manifests ------------------------------------------------------------------------------------------

    def head_manifest(self, reference: str) -> Descriptor | None:
        """What tag or digest ``reference`` names now (one HEAD); ``None`` when nothing.

        Raises:
            RemoteError: The registry answered something else, or no digest.
        """
        response = self.request("HEAD", self._manifest_url(reference), headers={"Accept": _MANIFEST_ACCEPT})
        if response.status_code == 404:
            return None
        self._expect(response, 200, f"HEAD manifest {reference}")
        digest = response.headers.get("docker-content-digest", "")
        if not digest.startswith("sha256:") or len(digest) != 71:
            return None  # a registry that sends no digest on HEAD: the caller GETs
        size = int(response.headers.get("content-length") or 0)
        return Descriptor(_media(response), digest, size)

    def digest_of(self, reference: str) -> str | None:
        """The digest of the manifest tag or digest ``reference`` names now; ``None`` when nothing.

        One HEAD; a GET only from a registry that sends no digest on HEAD.
        """
        head = self.head_manifest(reference)
        if head is not None:
            return head.digest
        manifest = self.get_manifest(reference)
        return manifest.digest if manifest is not None else None

    def get_manifest(self, reference: str) -> Manifest | None:
        """The manifest or index ``reference`` names, checked; ``None`` when there is none.

        Raises:
            RemoteDataError: Too big, too deep, not JSON, of a media type not asked
                for, or (by digest) not the bytes named.
        """
        response, raw = self.read(
            self._manifest_url(reference), MAX_MANIFEST_BYTES, f"the manifest {reference}", accept=_MANIFEST_ACCEPT
        )
        if response.status_code == 404:
            return None
        self._expect(response, 200, f"GET manifest {reference}")
        media = _media(response)
        sent_digest = response.headers.get("docker-content-digest")
        digest = sha256_digest(raw)
        if reference.startswith("sha256:") and digest != reference:
            raise DigestMismatchError(
                f"The registry {self.ref.host} answered the manifest {reference} with other bytes ({digest})."
            )
        if sent_digest and sent_digest.startswith("sha256:") and sent_digest != digest:
            raise DigestMismatchError(
                f"The registry {self.ref.host} says the manifest {reference} is {sent_digest}, "
                f"but its bytes are {digest}."
            )
        doc = self._manifest_json(raw, reference)
        declared = doc.get("mediaType")
        if media not in (MANIFEST_MEDIA_TYPE, INDEX_MEDIA_TYPE) or (declared is not None and declared != media):
            raise RemoteDataError(
                f"The registry {self.ref.host} answered {reference} with a {media or 'typeless'} document, "
                "not an OCI manifest or index."
            )
        return Manifest(raw, digest, media, doc)

    def put_manifest(self, reference: str, raw: bytes, media_type: str) -> tuple[str, bool]:
        """Store ``raw`` under ``reference`` (a tag or its digest).

        Returns:
            The manifest's digest, and whether the registry processed its ``subject``
            (the ``OCI-Subject`` header: no referrers tag needs updating).
        """
        if len(raw) > MAX_MANIFEST_BYTES:
            raise RemoteDataError(f"A manifest of {len(raw)} bytes is over the {MAX_MANIFEST_BYTES} a registry takes.")
        response = self.request("PUT", self._manifest_url(reference), headers={"Content-Type": media_type}, content=raw)
        self._expect(response, 201, f"PUT manifest {reference}")
        return sha256_digest(raw), "oci-subject" in response.headers

    def delete_manifest(self, digest: str) -> bool:
        """Delete the manifest ``digest``; whether the registry did (many refuse: 405)."""
        response = self.request("DELETE", self._manifest_url(digest))
        return response.status_code == 202

    def _manifest_json(self, raw: bytes, reference: str) -> dict[str, Any]:
        try:
            doc = loads_bounded(raw, what=f"the manifest {reference}", max_depth=MAX_MANIFEST_DEPTH)
        except ValueError:
            raise RemoteDataError(f"The manifest {reference} of {self.ref.display} is not JSON.") from None
        if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
            raise RemoteDataError(f"The manifest {reference} of {self.ref.display} is not an OCI schema 2 document.")
        return doc

    def _manifest_url(self, reference: str) -> str:
        return f"{self.ref.repository_url}/manifests/{reference}"

    # -- blobs ----------------------------------------------------------------------------------------------

    def blob_url(self, digest: str) -> str:
        """``/v2/<name>/blobs/<digest>``."""
        return f"{self.ref.repository_url}/blobs/{digest}"

    def has_blob(self, digest: str) -> bool:
        """Whether the repository holds the blob ``digest`` (one HEAD)."""
        response = self.request("HEAD", self.blob_url(digest))
        if response.status_code == 404:
            return False
        self._expect(response, 200, f"HEAD blob {digest}")
        return True

    def get_blob(self, digest: str, max_bytes: int) -> bytes:
        """The whole blob ``digest``, checked against it, refused past ``max_bytes``."""
        return b"".join(self.iter_blob(digest, max_bytes))

    def iter_blob(self, digest: str, max_bytes: int) -> Iterator[bytes]:
        """The blob ``digest`` as it arrives; the last chunk is yielded only once the digest matched.

        Raises:
            DigestMismatchError: The bytes are not ``digest`` (exit 8).
            RemoteDataError: More than ``max_bytes`` came.
            ReleaseNotFoundError: The registry has no such blob.
        """
        from llama_runtime.runtime.errors import ReleaseNotFoundError

        hasher = hashlib.sha256()
        total = 0
        with contextlib.closing(self.request("GET", self.blob_url(digest), stream=True)) as response:
            if response.status_code == 404:
                raise ReleaseNotFoundError(f"The registry {self.ref.display} has no blob {digest}.")
            self._expect(response, 200, f"GET blob {digest}")
            held = b""
            try:
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    if total > max_bytes:
                        raise RemoteDataError(f"The blob {digest} of {self.ref.display} is over {max_bytes} bytes.")
                    hasher.update(chunk)
                    if held:
                        yield held
                    held = chunk
            except httpx.HTTPError as exc:
                raise NetworkError(f"Reading the blob {digest} failed ({type(exc).__name__}).") from None
        if "sha256:" + hasher.hexdigest() != digest:
            raise DigestMismatchError(
                f"The registry {self.ref.display} sent bytes for the blob {digest} that are "
                f"sha256:{hasher.hexdigest()}; they were not used."
            )
        if held:
            yield held

    def mount_blob(self, digest: str, from_name: str) -> bool:
        """Mount ``digest`` from repository ``from_name`` of the same registry; whether it was mounted."""
        query = urlencode({"mount": digest, "from": from_name})
        response = self.request("POST", f"{self.ref.repository_url}/blobs/uploads/?{query}")
        if response.status_code == 201:
            return True
        if response.status_code == 202:  # no mount: an upload session was opened instead; close it
            location = response.headers.get("location")
            if location:
                self.request("DELETE", urljoin(self.ref.repository_url + "/", location))
        return False

    def push_blob(
        self,
        digest: str,
        size: int,
        chunks: Callable[[int], Iterator[bytes]],
        progress: Callable[[int], None] | None = None,
        *,
        session: Path | None = None,
    ) -> None:
        """Upload the blob ``digest`` of ``size`` bytes, read by ``chunks(offset)`` from ``offset`` on.

        Small blobs go in one PUT; large ones as PATCH chunks, an interrupted
        upload resumed from the offset the registry reports (``Range``).

        Args:
            session: Where a chunked upload that fails or is interrupted records its open session,
                so the next push of this blob resumes it from what the registry holds (a session
                the registry no longer knows starts over). Without it, or for a one-PUT blob, a
                failed upload's session is closed instead.

        Raises:
            RemoteError: The registry refused the upload (a digest mismatch included).
        """
        upload = self._resumed_session(session, digest) or _Upload(self._start_upload())
        try:
            self._send_blob(upload, digest, size, chunks, progress)
        except BaseException:
            if session is not None and size > MONOLITHIC_MAX_BYTES:
                with contextlib.suppress(OSError):
                    write_record(session, {"digest": digest, "location": upload.location})
            else:  # the registry would keep the abandoned session until it expires it (best effort)
                with contextlib.suppress(Exception):
                    self.request("DELETE", upload.location).close()
            raise
        if session is not None:
            session.unlink(missing_ok=True)

    def _resumed_session(self, session: Path | None, digest: str) -> _Upload | None:
        """The open upload of ``digest`` an earlier push recorded at ``session``, where the registry has it."""
        if session is None:
            return None
        try:
            record = read_record(session)
        except (OSError, DamagedRecordError):
            return None
        location = record.get("location") if isinstance(record, dict) else None
        if not isinstance(location, str) or record.get("digest") != digest or not same_origin(location, self.origin):
            session.unlink(missing_ok=True)
            return None
        try:
            return self._upload_offset(location)
        except RemoteError:  # expired, or never there: a new session
            session.unlink(missing_ok=True)
            return None

    def _send_blob(
        self,
        upload: _Upload,
        digest: str,
        size: int,
        chunks: Callable[[int], Iterator[bytes]],
        progress: Callable[[int], None] | None,
    ) -> None:
        """Send the blob from ``upload.offset``; ``upload`` always holds the registry's latest location."""
        if size <= MONOLITHIC_MAX_BYTES:
            body = b"".join(chunks(0))
            self._finish_upload(upload.location, digest, body)
            if progress is not None:
                progress(size)
            return
        resumes = 0
        while upload.offset < size:
            try:
                self._patch_chunks(upload, chunks, size, progress)
            except NetworkError:
                resumes += 1
                if resumes > MAX_UPLOAD_RESUMES:
                    raise
                held = self._upload_offset(upload.location)
                upload.location, upload.offset = held.location, held.offset
        self._finish_upload(upload.location, digest, b"")

    def _start_upload(self) -> str:
        # Repeatable: a session a failed POST may have opened is abandoned, and the registry expires it.
        response = self.request("POST", f"{self.ref.repository_url}/blobs/uploads/", repeatable=True)
        self._expect(response, 202, "POST blob upload")
        return urljoin(self.ref.repository_url + "/", str(response.headers.get("location", "")))

    def _patch_chunks(
        self,
        upload: _Upload,
        chunks: Callable[[int], Iterator[bytes]],
        size: int,
        progress: Callable[[int], None] | None,
    ) -> None:
        """PATCH from ``upload.offset`` to the end; ``upload`` always holds the last location the registry gave."""
        buffer = b""
        for piece in chunks(upload.offset):
            buffer += piece
            while len(buffer) >= CHUNK_BYTES or (buffer and upload.offset + len(buffer) >= size):
                part, buffer = buffer[:CHUNK_BYTES], buffer[CHUNK_BYTES:]
                upload.location = self._patch(upload.location, part, upload.offset)
                upload.offset += len(part)
                if progress is not None:
                    progress(upload.offset)

    def _patch(self, location: str, part: bytes, offset: int) -> str:
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Range": f"{offset}-{offset + len(part) - 1}",
        }
        response = self.request("PATCH", location, headers=headers, content=part)
        self._expect(response, 202, "PATCH blob chunk")
        return urljoin(location, str(response.headers.get("location", location)))

    def _upload_offset(self, location: str) -> _Upload:
        """Where an interrupted upload stands (``GET`` its location: ``Range: 0-<last byte>``)."""
        response = self.request("GET", location)
        self._expect(response, 204, "GET upload status")
        end = str(response.headers.get("range", "0--1")).rpartition("-")[2]
        # Distribution answers "0-0" for an empty upload too; a first chunk is never one byte, so it means none.
        held = int(end) + 1 if end.isdigit() and end != "0" else 0
        return _Upload(urljoin(location, str(response.headers.get("location", location))), held)

    def _finish_upload(self, location: str, digest: str, body: bytes) -> None:
        sep = "&" if "?" in location else "?"
        response = self.request(
            "PUT",
            f"{location}{sep}{urlencode({'digest': digest})}",
            headers={"Content-Type": "application/octet-stream"},
            content=body,
        )
        self._expect(response, 201, f"PUT blob {digest}")

    # -- referrers and tags ---------------------------------------------------------------------------------

    def referrers(self, digest: str, artifact_type: str | None = None) -> list[Descriptor]:
        """The manifests whose ``subject`` is ``digest``: the referrers API, else the referrers tag schema.

        A registry without the API answers 404 there (CNCF Distribution 2.8);
        then the index tagged ``sha256-<hex>`` is read, as the spec's fallback says.
        """
        url = f"{self.ref.repository_url}/referrers/{digest}"
        if artifact_type:
            url += "?" + urlencode({"artifactType": artifact_type})
        response, raw = self.read(url, MAX_MANIFEST_BYTES, f"the referrers of {digest}", accept=INDEX_MEDIA_TYPE)
        doc: dict[str, Any] | None = None
        if response.status_code == 200 and _media(response) == INDEX_MEDIA_TYPE:
            doc = self._manifest_json(raw, f"referrers/{digest}")
        elif response.status_code not in (404, 400, 405):
            self._expect(response, 200, f"GET referrers {digest}")
        if doc is None:
            index = self.get_manifest(referrers_tag(digest))
            doc = index.doc if index is not None and index.media_type == INDEX_MEDIA_TYPE else {"manifests": []}
        found = [parse_descriptor(d, f"the referrers of {digest}") for d in _list(doc.get("manifests"))]
        # A descriptor without artifactType is kept (copying tools drop the field); the caller
        # judges it by the referrer manifest's own artifactType.
        return [d for d in found if artifact_type is None or d.artifact_type in (artifact_type, None)]

    def add_referrer_to_tag(self, subject: str, referrer: Descriptor) -> bool:
        """Add ``referrer`` to the referrers tag of ``subject`` (registries without the referrers API).

        Read, extend, write; whether it wrote. Entries already listed are kept, so
        referrers merge, never replace. A second writer between the read and the
        write may lose an entry, which its next sync writes again (the referrer
        itself stays, kept by its own tag).
        """
        tag = referrers_tag(subject)
        index = self.get_manifest(tag)
        entries = _list(index.doc.get("manifests")) if index is not None else []
        if any(isinstance(e, dict) and e.get("digest") == referrer.digest for e in entries):
            return False
        doc = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [*entries, referrer.to_json()]}
        self.put_manifest(tag, json.dumps(doc, separators=(",", ":")).encode(), INDEX_MEDIA_TYPE)
        return True

    def tags(self) -> list[str]:
        """Every tag of the repository (pages followed through ``Link``, at most :data:`MAX_TAG_PAGES`)."""
        url: str | None = f"{self.ref.repository_url}/tags/list?n={TAGS_PER_PAGE}"
        found: list[str] = []
        for _page in range(MAX_TAG_PAGES):
            if url is None:
                break
            response, raw = self.read(url, MAX_MANIFEST_BYTES, "the tag list")
            if response.status_code == 404:
                return found
            self._expect(response, 200, "GET tags")
            link = response.headers.get("link", "")
            try:
                doc = loads_bounded(raw, what="the tag list")
            except ValueError:
                raise RemoteDataError(f"The tag list of {self.ref.display} is not JSON.") from None
            found += [t for t in _list(doc.get("tags") if isinstance(doc, dict) else None) if isinstance(t, str)]
            url = _next_link(link, url)
            if url is not None and not same_origin(url, self.origin):
                raise RemoteError(
                    f"The registry {self.ref.host} pointed its next tag page to {origin_of(url)}, another origin; "
                    "it was not followed."
                )
        return found

    # -- answers --------------------------------------------------------------------------------------------

    def _expect(self, response: httpx.Response, status: int, what: str) -> None:
        if response.status_code == status or (status == 200 and response.status_code == 206):
            return
        response.close()
        raise RemoteError(
            f"The registry {self.ref.host} answered {what} on {self.ref.name} with HTTP {response.status_code}."
        )


@dataclass
class _Upload:
    """A chunked upload in progress: the location to send to next, and the bytes the registry holds."""

    location: str
    offset: int = 0


def _media(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "")).split(";", 1)[0].strip()


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _next_link(link: str, current: str) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, resolved against ``current``."""
    if 'rel="next"' not in link:
        return None
    start, end = link.find("<"), link.find(">")
    return urljoin(current, link[start + 1 : end]) if 0 <= start < end else None
