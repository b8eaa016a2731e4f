"""Attestation bundles GitHub lists by ``bundle_url``: fetched without credentials, decoded under a cap.

Since July 2026 the attestations API answers entries as ``{"bundle": null,
"bundle_url": "https://….blob.core.windows.net/attestations/…/N.json.sn?<sas>"}``
(API version 2026-03-10 deprecates the inline form; it happens with
``X-GitHub-Api-Version: 2022-11-28`` pinned too). Clients that fixed the same
break report what the URL serves: denoland/clawpatrol PR #770 (and its issue, denoland/clawpatrol #769),
aaif-goose/goose PR #10557, terraform-linters/tflint PR #2593 — a pre-signed,
time-limited blob on a third-party host, the Sigstore bundle JSON
**snappy-compressed** (``Content-Type: application/x-snappy``, ``.json.sn``),
snappy *block* format today; clawpatrol also accepts the framed format and raw
JSON in case GitHub changes the encoding, and so does this module.

Invariants:
    * A bundle URL gets no ``Authorization`` and no GitHub header: it is
      pre-signed, and a GitHub token on a blob host is a leaked token
      (goose PR #10557: "API credentials shouldn't be sent to blob storage").
      https only; http only on loopback, and only when the API itself is a
      loopback origin (tests); never a URL with user information (httpx would
      send it as Basic auth); never followed through a redirect.
    * The URL's query string is its signature: it never appears in a message,
      a log line, a record or a stored file (:func:`redact_url`; mirrors store
      the decoded bundle inline and drop the URL).
    * Decoded sizes are checked before anything is allocated (the snappy
      block's length preamble, every framed chunk's), against one byte budget
      per attestations answer; all fetches of one answer share one deadline.

cramjam (the decoder) is imported only here, when a payload is decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.errors import NetworkError, RemoteDataError, RemoteError
from llama_runtime.updater.credentials import redact_url
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.net.body import read_capped, too_slow
from llama_runtime.updater.net.origin import is_loopback_host
from llama_runtime.updater.release.remote_json import loads_bounded

if TYPE_CHECKING:
    from llama_runtime.updater.net.session import Session

__all__ = [
    "MAX_BUNDLE_BYTES",
    "ResolvedAttestations",
    "bundle_url_refusal",
    "decode_bundle_payload",
    "fetch_bundle",
    "resolve_bundle_urls",
]

#: Largest decoded bundle, and the decoded total of one attestations answer (bytes). A
#: Sigstore bundle is a few kB (a certificate, a log entry, a statement); clawpatrol PR #770
#: caps the decompressed size at 16 MiB, checked before allocating. Same as the API body cap.
MAX_BUNDLE_BYTES: Final[int] = 16 * 1024 * 1024
# The snappy framing format's stream identifier chunk (google/snappy framing_format.txt §4.1).
_FRAMED_MAGIC: Final[bytes] = b"\xff\x06\x00\x00sNaPpY"
# framing_format.txt §4.2/4.3: a compressed or uncompressed chunk decodes to at most 65536 bytes.
_FRAME_MAX_DECODED: Final[int] = 65536
_CHUNK_COMPRESSED: Final[int] = 0x00
_CHUNK_UNCOMPRESSED: Final[int] = 0x01
_CHUNK_STREAM_ID: Final[int] = 0xFF
# §4.5/4.6: 0x02-0x7f are reserved unskippable (an error), 0x80-0xfe skippable (padding included).
_FIRST_SKIPPABLE: Final[int] = 0x80
# What JSON may start with, after blanks. As a snappy block preamble '{' would declare 123
# decoded bytes, and blanks 9-32: no Sigstore bundle (it carries a certificate) is that small.
_JSON_START: Final[bytes] = b"{"
_BLANKS: Final[bytes] = b" \t\r\n"
log = get_logger("llama_runtime.bundle_url")
# Entries of one answer fetched by URL, at most: GitHub lists one per attestation (a build's
# provenance, the release attestation of an immutable release); 30 is the API's default page.
MAX_BUNDLE_URLS: Final[int] = 30


@dataclass(frozen=True)
class ResolvedAttestations:
    """An attestations answer whose ``bundle_url`` entries were fetched and put inline.

    Attributes:
        answer: The API's JSON, each fetched entry with its bundle inline and without its
            ``bundle_url`` (pre-signed and expiring: a credential, worthless once stored).
        failures: Why listed entries could not be fetched or decoded (URLs redacted).
    """

    answer: object
    failures: tuple[str, ...] = ()


def bundle_url_refusal(url: str, api_url: str) -> str | None:
    """Why ``url`` may not be fetched for an answer of ``api_url``, or ``None`` when it may."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        api = urlsplit(api_url)
    except ValueError:
        return "it is not a URL"
    scheme = parts.scheme.lower()
    if not host:
        return "it is not an absolute URL"
    if parts.username is not None or parts.password is not None:
        return "it carries user information (credentials)"
    if api.scheme.lower() == "file":
        return "a file:// mirror stores bundles inline (run `llama-runtime mirror sync` again)"
    if scheme == "https":
        return None
    loopback_api = api.scheme.lower() == "http" and is_loopback_host(api.hostname or "")
    if scheme == "http" and is_loopback_host(host) and loopback_api:
        return None  # a test server: the API itself is on this machine
    return "only https is accepted"


def resolve_bundle_urls(
    answer: object, fetch: Callable[[str, int], tuple[dict[str, Any], int]]
) -> ResolvedAttestations:
    """``answer`` with each entry listed by ``bundle_url`` alone replaced by one carrying the bundle.

    Args:
        answer: The attestations API's JSON; any other shape comes back unchanged.
        fetch: Fetches and decodes one URL within a decoded-byte budget: the bundle and its
            decoded size (:func:`fetch_bundle`); raises :class:`~runtime.errors.RemoteError`
            or :class:`~updater.release.release.RemoteDataError` with a redacted sentence.
    """
    if not isinstance(answer, dict) or not isinstance(answer.get("attestations"), list):
        return ResolvedAttestations(answer)
    entries: list[object] = []
    failures: list[str] = []
    budget = MAX_BUNDLE_BYTES
    fetched = 0
    for entry in answer["attestations"]:
        url = entry.get("bundle_url") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or isinstance(entry.get("bundle"), dict) or not isinstance(url, str):
            entries.append(entry)
            continue
        fetched += 1
        if fetched > MAX_BUNDLE_URLS:
            failures.append(f"more than {MAX_BUNDLE_URLS} attestations listed by bundle_url; the rest were not fetched")
            continue
        try:
            bundle, size = fetch(url, budget)
        except (RemoteError, RemoteDataError) as exc:  # one entry's failure, not the answer's
            failures.append(exc.message)
            continue
        budget -= size
        entries.append({**{k: v for k, v in entry.items() if k != "bundle_url"}, "bundle": bundle})
    return ResolvedAttestations({**answer, "attestations": entries}, tuple(dict.fromkeys(failures)))


def fetch_bundle(
    net: Session,
    url: str,
    *,
    api_url: str,
    budget: int,
    give_up_at: float,
    deadline_s: float,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[dict[str, Any], int]:
    """The Sigstore bundle at ``url`` and its decoded size, fetched with no credentials.

    Args:
        net: The network layer; the request carries no credentials and no GitHub header.
        url: The entry's ``bundle_url``.
        api_url: The API root that listed it (decides whether loopback http is allowed).
        budget: Most decoded bytes this bundle may take.
        give_up_at: ``clock.monotonic()`` deadline shared by every fetch of one answer.
        deadline_s: The whole deadline's length, for the message when it passes.
        clock: Where the deadline's time comes from.

    Raises:
        RemoteError: A refused URL or an HTTP error.
        NetworkError: No connection, or the deadline passed.
        RemoteDataError: Too large, undecodable, or not a Sigstore bundle.
    """
    import httpx

    shown = redact_url(url)
    refusal = bundle_url_refusal(url, api_url)
    if refusal is not None:
        raise RemoteError(f"the attestation bundle URL {shown} was not fetched: {refusal}")
    what = f"the attestation bundle {shown}"
    left = give_up_at - clock.monotonic()
    if left <= 0:
        raise too_slow(what, deadline_s)
    try:
        # The pre-signed URL alone authorises the read: no credentials, one try (the deadline is shared).
        response = net.send(
            "GET", url, headers={"Accept-Encoding": "gzip"}, stream=True, attempts=1, follow_redirects=False
        )
        try:
            if response.status_code != 200:
                raise RemoteError(f"{what} could not be fetched (HTTP {response.status_code})")
            try:
                raw = read_capped(response, cap=MAX_BUNDLE_BYTES, what=what, deadline_s=left, clock=clock)
            except NetworkError:  # what is left of the shared deadline ran out: name the whole one
                raise too_slow(what, deadline_s) from None
        finally:
            response.close()
    except httpx.HTTPError as exc:
        raise NetworkError(f"{what} could not be fetched: {type(exc).__name__}") from exc
    except (httpx.InvalidURL, ValueError) as exc:  # a URL urlsplit took but httpx cannot address
        raise RemoteError(f"the attestation bundle URL {shown} was not fetched: it is not a valid URL") from exc
    data = decode_bundle_payload(raw, cap=min(budget, MAX_BUNDLE_BYTES), what=what)
    log.debug("attestation bundle fetched", url=shown, received_bytes=len(raw), decoded_bytes=len(data))
    return _bundle_of(data, what), len(data)


def _bundle_of(data: bytes, what: str) -> dict[str, Any]:
    try:
        bundle = loads_bounded(data, what=what)
    except ValueError:
        raise RemoteDataError(f"{what} decoded to something that is not JSON") from None
    if not isinstance(bundle, dict) or "verificationMaterial" not in bundle:
        raise RemoteDataError(f"{what} decoded to JSON that is not a Sigstore bundle")
    return bundle


# -- snappy ------------------------------------------------------------------------------


def decode_bundle_payload(raw: bytes, *, cap: int = MAX_BUNDLE_BYTES, what: str = "the bundle") -> bytes:
    """The JSON bytes of a ``bundle_url`` payload: snappy framed, raw JSON, or snappy block.

    Sniffed, not trusted from ``Content-Type``: framed starts with the stream
    identifier, JSON with ``{``; anything else is a snappy block (what GitHub
    serves today). The decoded length is read from the format's own length
    fields and checked against ``cap`` before the decoder allocates it.

    Raises:
        RemoteDataError: Larger than ``cap`` once decoded, or not valid in its format.
    """
    if raw.startswith(_FRAMED_MAGIC):
        _check_size(_framed_length(raw, what), cap, what)
        return _cramjam_decode(raw, framed=True, what=what)
    if raw.lstrip(_BLANKS).startswith(_JSON_START):
        _check_size(len(raw), cap, what)
        return raw
    length, _start = _block_length(raw, what)
    _check_size(length, cap, what)
    return _cramjam_decode(raw, framed=False, what=what, length=length)


def _check_size(length: int, cap: int, what: str) -> None:
    if length > cap:
        raise RemoteDataError(
            f"{what} declares {length} bytes once decoded, more than the {cap // (1024 * 1024)} MiB "
            "a Sigstore bundle could need; it was not decoded"
        )


def _block_length(raw: bytes, what: str, offset: int = 0) -> tuple[int, int]:
    """A snappy block's decoded length and where its body starts.

    google/snappy format_description.txt §1: the block starts with the
    uncompressed length (at most 2^32 - 1) as a little-endian base-128 varint.
    """
    value = 0
    for i in range(5):  # 2^32 - 1 needs 5 varint bytes
        if offset + i >= len(raw):
            break
        byte = raw[offset + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                break
            return value, offset + i + 1
    raise RemoteDataError(f"{what} is not snappy, framed snappy or JSON (no valid length preamble)")


def _framed_length(raw: bytes, what: str) -> int:
    """The decoded length of a framed snappy stream, from its chunk headers (nothing is decompressed).

    framing_format.txt §3-4: chunks of a type byte and a 24-bit little-endian
    length; a compressed chunk is a masked CRC-32C then a snappy block.
    """
    total, pos = 0, 0
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise RemoteDataError(f"{what} is framed snappy cut short inside a chunk header")
        kind, size = raw[pos], int.from_bytes(raw[pos + 1 : pos + 4], "little")
        body_at, pos = pos + 4, pos + 4 + size
        if pos > len(raw):
            raise RemoteDataError(f"{what} is framed snappy cut short inside a chunk")
        if kind == _CHUNK_COMPRESSED:
            decoded, _start = _block_length(raw, what, body_at + 4) if size > 4 else (-1, 0)
        elif kind == _CHUNK_UNCOMPRESSED:
            decoded = size - 4
        elif kind == _CHUNK_STREAM_ID or kind >= _FIRST_SKIPPABLE:
            continue
        else:
            raise RemoteDataError(f"{what} is framed snappy with a reserved chunk type 0x{kind:02x}")
        if not 0 <= decoded <= _FRAME_MAX_DECODED:
            raise RemoteDataError(f"{what} is framed snappy with a chunk of an invalid size")
        total += decoded
    return total


def _cramjam_decode(raw: bytes, *, framed: bool, what: str, length: int | None = None) -> bytes:
    # cramjam: Rust's snap crate behind a small wheel; it checks the framed CRC-32Cs.
    import cramjam

    try:
        if framed:
            return bytes(cramjam.snappy.decompress(raw))
        return bytes(cramjam.snappy.decompress_raw(raw, output_len=length))
    except cramjam.DecompressionError as exc:
        raise RemoteDataError(f"{what} is not valid snappy ({str(exc)[:80]})") from None
