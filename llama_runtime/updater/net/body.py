"""Answer bodies read with a ceiling: every body (JSON, tokens, error pages, manifests) is capped while it streams.

The cap is applied to decoded bytes, and inflating happens here in steps no larger than what the
cap still allows, so neither a huge body nor a gzip bomb reaches memory; the error names the cap.
"""

from __future__ import annotations

import zlib
from typing import Final

import httpx

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.errors import NetworkError, RemoteDataError
from llama_runtime.runtime.fsutil import decimal

__all__ = [
    "ACCEPT_ENCODING",
    "API_BODY_DEADLINE_SECONDS",
    "MAX_API_BODY_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "read_capped",
    "too_slow",
]


#: What API requests accept: gzip only, which :func:`read_capped` inflates itself
#: in bounded steps (httpx would also offer br/zstd when those modules exist).
ACCEPT_ENCODING: Final[str] = "gzip"
_ZLIB_ENCODINGS: Final[frozenset[str]] = frozenset({"gzip", "x-gzip", "deflate"})
# 32 + MAX_WBITS: zlib detects a gzip or a zlib header by itself.
_GZIP_OR_ZLIB_WBITS: Final[int] = 32 + zlib.MAX_WBITS

#: Largest error page or token answer read (bytes): a sentence and a link, or one token.
MAX_ERROR_BODY_BYTES: Final[int] = 64 * 1024
#: Largest decoded API body. The biggest answer we ask for is one page of 100
#: releases; a llama.cpp release has ~45 assets of ~1.8 KB JSON each (the
#: uploader object is most of it), so a page is ~8 MB. 16 MiB is twice that,
#: and a gzip bomb stops here instead of at the machine's memory.
MAX_API_BODY_BYTES: Final[int] = 16 * 1024 * 1024
#: Longest an API answer may take to arrive in full (seconds). A page of 100 releases is a
#: few MB; even at 50 KB/s it is in within a minute. A server that drips a byte at a time
#: (each read inside the read timeout) must not hold the update lock for hours.
API_BODY_DEADLINE_SECONDS: Final[float] = 120.0


def read_capped(
    response: httpx.Response,
    *,
    cap: int = MAX_API_BODY_BYTES,
    what: str,
    deadline_s: float = API_BODY_DEADLINE_SECONDS,
    clock: Clock = SYSTEM_CLOCK,
) -> bytes:
    """The decoded body of a streamed ``response``, refusing more than ``cap`` bytes.

    Decompression is done here, in steps of at most what the cap still allows
    (``max_length``): httpx would inflate a whole network read at once, and
    64 KiB of gzip can be 64 MiB of zeros.

    Raises:
        RemoteDataError: The decoded body exceeds ``cap`` (reading stops there),
            or it uses an encoding that was not asked for.
        NetworkError: The body took longer than ``deadline_s`` to arrive.
        httpx.HTTPError: The transfer failed (the caller maps it).
    """
    try:
        finished = response.content  # a transport that hands over a finished body (the file:// mirror)
    except httpx.ResponseNotRead:
        pass
    else:
        if len(finished) > cap:
            raise _too_big(what, cap)
        return finished
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        inflater = None
    elif encoding in _ZLIB_ENCODINGS:
        inflater = zlib.decompressobj(_GZIP_OR_ZLIB_WBITS)
    else:
        raise RemoteDataError(f"The server sent {what} in the encoding {encoding[:40]!r}, which was not asked for.")
    declared = decimal(response.headers.get("content-length", ""))
    if inflater is None and declared is not None and declared > cap:
        raise _too_big(what, cap)
    pieces: list[bytes] = []
    total = 0
    give_up_at = clock.monotonic() + deadline_s
    try:
        for raw in response.iter_raw():
            if clock.monotonic() > give_up_at:
                raise too_slow(what, deadline_s)
            pending = raw
            while pending:
                if inflater is None:
                    out, pending = pending, b""
                else:
                    out = inflater.decompress(pending, cap + 1 - total)
                    pending = inflater.unconsumed_tail
                total += len(out)
                if total > cap:
                    raise _too_big(what, cap)
                pieces.append(out)
    except zlib.error as exc:
        raise RemoteDataError(f"The server sent {what} whose compression is corrupt ({exc}).") from exc
    return b"".join(pieces)


def too_slow(what: str, deadline_s: float) -> NetworkError:
    """The error for a body that did not arrive within ``deadline_s`` seconds."""
    return NetworkError(
        f"The server took longer than {deadline_s:g} s to send {what}; it is too slow or stalling. Try again later."
    )


def _too_big(what: str, cap: int) -> RemoteDataError:
    return RemoteDataError(
        f"The server sent {what} larger than {_size(cap)} once decoded, the cap for it; it was not read further."
    )


def _size(count: int) -> str:
    if count >= 1024 * 1024 and count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MiB"
    if count >= 1024 and count % 1024 == 0:
        return f"{count // 1024} KiB"
    return f"{count} bytes"
