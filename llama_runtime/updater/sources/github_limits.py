"""GitHub's rate limits: what an answer's headers say, the error a refusal becomes, and the token hint.

GitHub docs, "Rate limits for the REST API": primary limits report ``x-ratelimit-*`` on every
answer; a secondary limit is a 403/429 with quota left. The hint names only the token variables
the token policy (:mod:`~updater.credentials`) sends to that origin.
"""

from __future__ import annotations

import time
from typing import Final

import httpx

from llama_runtime.runtime.errors import RateLimitError
from llama_runtime.runtime.fsutil import decimal, parse_record
from llama_runtime.updater.credentials import GITHUB_API_ORIGIN, redact_url, token_names_for
from llama_runtime.updater.net.limits import RateLimit

__all__ = ["SECONDARY_BACKOFF_SECONDS", "int_header", "rate_limit_error", "rate_limit_of", "token_hint"]

# An error answer's JSON is a sentence and a link; more is not GitHub's error body.
_ERROR_BODY_BYTES: Final[int] = 4096
# GitHub: for a secondary rate limit without retry-after, "wait for at least one minute".
SECONDARY_BACKOFF_SECONDS: Final[int] = 60


def token_hint(api_url: str) -> str:
    """How to send a token to ``api_url``: only the variables the token policy sends there."""
    names = token_names_for(api_url)
    if names is None:
        return f"No token is ever sent to {redact_url(api_url)} over plain http; use https to send one."
    if names.startswith("GITHUB_TOKEN"):
        return f"Set {names} to raise the limit from 60 to 5,000 requests an hour."
    return (
        f"Set {names} to send a token to {redact_url(api_url)} "
        "(GITHUB_TOKEN and GH_TOKEN go only to https://api.github.com)."
    )


def int_header(response: httpx.Response, name: str) -> int | None:
    """The header ``name`` as a non-negative integer, or None when absent or not one."""
    return decimal(response.headers.get(name, ""))  # bounded: a 5,000-digit header is not a number


def rate_limit_of(response: httpx.Response) -> RateLimit | None:
    """The quota an API answer reports (``x-ratelimit-*``), or None when it reports none."""
    if "x-ratelimit-remaining" not in response.headers:
        return None
    return RateLimit(
        limit=int_header(response, "x-ratelimit-limit"),
        remaining=int_header(response, "x-ratelimit-remaining"),
        reset=int_header(response, "x-ratelimit-reset"),
    )


def rate_limit_error(
    response: httpx.Response, body: bytes, *, has_token: bool, api_url: str = GITHUB_API_ORIGIN
) -> RateLimitError | None:
    """The error a 403/429 answer means when it is a rate limit (primary or secondary), else None."""
    retry_after = int_header(response, "retry-after")
    remaining = int_header(response, "x-ratelimit-remaining")
    if retry_after is None and remaining != 0:
        return _secondary_limit_error(response, remaining, body)
    reset = int_header(response, "x-ratelimit-reset")
    if retry_after is not None:
        when = f"retry after {retry_after} seconds"
    elif reset is not None:
        when = f"it resets at {_local_time(reset)}"
    else:
        when = "wait a while before retrying"
    return RateLimitError(
        f"GitHub's API rate limit is used up (HTTP {response.status_code}); {when}.",
        reset_at=float(reset) if reset is not None else None,
        retry_after=float(retry_after) if retry_after is not None else None,
        hint=None if has_token else token_hint(api_url),
    )


def _secondary_limit_error(response: httpx.Response, remaining: int | None, body: bytes) -> RateLimitError | None:
    """A secondary rate limit: 403/429 with quota left (or no headers) and no ``retry-after``.

    GitHub's docs ("Rate limits for the REST API"): "If the retry-after response
    header is present, you should not retry your request until after that many
    seconds has elapsed ... Otherwise, wait for at least one minute before
    retrying." A 403 with quota left is only a rate limit when the body says so
    (otherwise it is a permission problem); a 429 always is.
    """
    try:
        payload = parse_record(body[:_ERROR_BODY_BYTES], what="the error body")
    except ValueError:  # an HTML page, a cut body, JSON nested past any error's: not GitHub's JSON error
        payload = None
    message = str(payload.get("message", "")) if isinstance(payload, dict) else ""
    if response.status_code != 429 and "rate limit" not in message.lower():
        return None
    left = f" ({remaining} requests of the hourly quota are left)" if remaining else ""
    return RateLimitError(
        f"GitHub's secondary rate limit refused the request (HTTP {response.status_code}){left}; "
        f"wait at least {SECONDARY_BACKOFF_SECONDS} seconds before retrying.",
        retry_after=float(SECONDARY_BACKOFF_SECONDS),
        hint="Secondary limits guard against bursts; the next scheduled check waits for it.",
    )


def _local_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S on %Y-%m-%d", time.localtime(epoch))
