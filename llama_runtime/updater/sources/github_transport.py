"""One API GET: retried on dropped connections and 5xx, read under a size cap, decoded as bounded JSON.

No ``httpx`` exception leaves this module; a failure is a
:class:`~llama_runtime.runtime.errors.RemoteError` subclass with one readable
sentence, and URLs in messages are redacted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import httpx

from llama_runtime.runtime.errors import NetworkError, RemoteError
from llama_runtime.runtime.retry import RETRY_ATTEMPTS, tries
from llama_runtime.updater.credentials import redact_url
from llama_runtime.updater.release.remote_names import printable
from llama_runtime.updater.sources.bounded_json import loads_bounded, read_capped

# A dead host should fail fast; GitHub can be slow to render big release lists.
DEFAULT_TIMEOUT: Final[httpx.Timeout] = httpx.Timeout(30.0, connect=10.0)
#: Tries for transient 5xx and dropped connections (the project's one schedule, runtime.retry).
ATTEMPTS: Final[int] = RETRY_ATTEMPTS
# What static web servers and S3-style buckets send for an extension-less file.
_STATIC_FILE_TYPES: Final[frozenset[str]] = frozenset(
    {"application/octet-stream", "binary/octet-stream", "text/plain", "unknown"}
)
# Characters of a Content-Type quoted in a message (a hostile header cannot flood it).
_CTYPE_QUOTE_CHARS: Final[int] = 60


def send_with_retries(
    http: httpx.Client, url: str, headers: dict[str, str], *, attempts: int, sleep: Callable[[float], None]
) -> tuple[httpx.Response, bytes]:
    """The (closed) response and its decoded body, read under the size cap.

    Connection errors and 5xx answers are tried ``attempts`` times with
    exponential backoff; the last 5xx answer is returned for the caller to
    report, other answers at once.

    Raises:
        NetworkError: The connection failed on every attempt.
        RemoteError: A redirect loop.
    """
    for last in tries(sleep, attempts=attempts):
        try:
            request = http.build_request("GET", url, headers=headers)
            response = http.send(request, stream=True, follow_redirects=True)
            try:
                body = read_capped(response, what=f"an answer for {redact_url(url)}")
            finally:
                response.close()
        except httpx.TooManyRedirects as exc:
            raise RemoteError(f"GitHub redirected in a loop for {redact_url(url)}.") from exc
        except httpx.HTTPError as exc:
            if last:
                raise NetworkError(
                    f"Could not reach GitHub at {redact_url(url)}: {type(exc).__name__}; "
                    "check the network connection and try again."
                ) from exc
        else:
            if response.status_code < 500 or last:
                return response, body
    raise AssertionError("unreachable: the last attempt returns or raises")


def decode_json(response: httpx.Response, raw: bytes) -> Any:
    """The JSON of an answer labelled JSON (or as a static file), depth- and size-bounded.

    Raises:
        RemoteError: The answer is not release data (an HTML page, malformed JSON).
    """
    ctype = response.headers.get("content-type", "unknown").split(";")[0].strip() or "unknown"
    # Static servers and buckets label extension-less mirror files as binary or
    # text; an HTML page is never release data (a portal or an error page).
    if "json" not in ctype and ctype not in _STATIC_FILE_TYPES:
        raise RemoteError(
            f"GitHub answered with something that is not release data ({printable(ctype[:_CTYPE_QUOTE_CHARS])})."
        )
    try:
        return loads_bounded(raw, what="release data")
    except ValueError as exc:
        raise RemoteError(
            f"GitHub answered with something that is not release data ({printable(ctype[:_CTYPE_QUOTE_CHARS])})."
        ) from exc
