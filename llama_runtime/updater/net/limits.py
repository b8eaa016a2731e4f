"""What a server's refusal to be asked now means, whichever server it is: ``Retry-After``, and a rate limit.

RFC 9110 §10.2.3: ``Retry-After`` is delay-seconds or an HTTP-date. A 429 is a rate limit; a 403
is one only when it says when to come back (``Retry-After``), otherwise it is a permission refusal.
GitHub's own quota headers stay in the GitHub adapter; this is what every source shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Final

import httpx

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock, backoff_seconds
from llama_runtime.runtime.errors import NetworkError, RateLimitError
from llama_runtime.runtime.fsutil import decimal

__all__ = [
    "DEFAULT_RATE_LIMIT_SECONDS",
    "MAX_RETRY_WAIT_SECONDS",
    "RateLimit",
    "extra_wait",
    "rate_limit_refusal",
    "retry_after_seconds",
]

#: How long to stay away after a 429 that names no time (seconds): GitHub's own advice for a
#: secondary limit, "wait for at least one minute", is as good a default as any server gives.
DEFAULT_RATE_LIMIT_SECONDS: Final[int] = 60
#: Longest ``Retry-After`` waited out within one command (seconds): a longer one is a rate limit the
#: scheduler honours (``rate_limited``, the next check skipped), not a command that hangs.
MAX_RETRY_WAIT_SECONDS: Final[float] = 10.0
#: Longest ``Retry-After`` taken at its word (seconds): a day; a longer one is a day.
MAX_RETRY_AFTER_SECONDS: Final[int] = 24 * 3600


@dataclass(frozen=True)
class RateLimit:
    """A server's own word about its request quota, as its source read it from an answer.

    Attributes:
        limit: Requests allowed per window, if sent.
        remaining: Requests left in the window, if sent.
        reset: UTC epoch seconds when the window resets, if sent.
    """

    limit: int | None
    remaining: int | None
    reset: int | None


def retry_after_seconds(response: httpx.Response, clock: Clock = SYSTEM_CLOCK) -> float | None:
    """Seconds ``response``'s ``Retry-After`` asks to wait (0 or more, at most a day); ``None`` without one."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    seconds = decimal(value)
    if seconds is None:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = max(0, round(when.timestamp() - clock.time()))
    return float(min(seconds, MAX_RETRY_AFTER_SECONDS))


def rate_limit_refusal(response: httpx.Response, who: str, clock: Clock = SYSTEM_CLOCK) -> RateLimitError | None:
    """The :class:`RateLimitError` (exit 7, ``rate_limited``) ``response`` means, or ``None`` when it is none."""
    status = response.status_code
    wait = retry_after_seconds(response, clock)
    if status != 429 and not (status == 403 and wait is not None):
        return None
    seconds = DEFAULT_RATE_LIMIT_SECONDS if wait is None else wait
    said = "" if wait is None else " (Retry-After)"
    return RateLimitError(
        f"{who} refused the request for its rate limit (HTTP {status}); retry after {seconds:g} seconds{said}.",
        retry_after=seconds,
        reset_at=clock.time() + seconds,
        hint="The next scheduled check waits until then.",
    )


def extra_wait(exc: BaseException, failed: int) -> float:
    """Seconds to wait beyond the backoff after the ``failed``-th try ended in ``exc`` (its ``Retry-After``)."""
    if not isinstance(exc, NetworkError) or exc.retry_after is None or exc.retry_after > MAX_RETRY_WAIT_SECONDS:
        return 0.0
    return max(0.0, exc.retry_after - backoff_seconds(failed))
