"""The home's GitHub rate-limit back-off (``cache/ratelimit.json``): when the API may be asked again.

The scheduled check skips while it runs (exit 0), an update asks nothing (exit 7): both store it
after a refusal (or an answer that spent the last request), so no second caller spends quota GitHub
said was gone. Pure time arithmetic plus one small record file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Final

from llama_runtime.runtime.fsutil import number, read_cache, write_record
from llama_runtime.updater.logs import get_logger, warn_state

if TYPE_CHECKING:
    from llama_runtime.runtime.errors import RateLimitError
    from llama_runtime.updater.net.limits import RateLimit

__all__ = [
    "BACKOFF_NAME",
    "DEFAULT_BACKOFF_SECONDS",
    "MAX_BACKOFF_SECONDS",
    "Backoff",
    "clamp_not_before",
    "not_before_after_error",
    "not_before_after_success",
]

BACKOFF_NAME: Final = "ratelimit.json"
# GitHub: without retry-after or a reset time, "wait for at least one minute".
DEFAULT_BACKOFF_SECONDS: Final[float] = 60.0
# GitHub's primary rate limit is counted per hour, so no honest answer asks us
# to wait longer; a longer wait comes from a skewed clock or a bogus header
# and would silently disable every check for days.
MAX_BACKOFF_SECONDS: Final[float] = 3600.0


def clamp_not_before(not_before: float, now: float) -> float:
    """``not_before``, but never more than :data:`MAX_BACKOFF_SECONDS` after ``now``."""
    return min(not_before, now + MAX_BACKOFF_SECONDS)


def not_before_after_error(exc: RateLimitError, now: float) -> float:
    """When to ask again after GitHub refused with a rate limit (at most an hour ahead)."""
    if exc.retry_after is not None:
        return clamp_not_before(now + exc.retry_after, now)
    if exc.reset_at is not None and exc.reset_at > now:
        return clamp_not_before(exc.reset_at, now)
    return now + DEFAULT_BACKOFF_SECONDS


def not_before_after_success(rate: RateLimit | None, now: float) -> float | None:
    """When to ask again after an answer that spent the last request, else ``None``."""
    if rate is None or rate.remaining is None or rate.remaining > 0:
        return None
    if rate.reset is not None and rate.reset > now:
        return clamp_not_before(float(rate.reset), now)
    return now + DEFAULT_BACKOFF_SECONDS


class Backoff:
    """The persisted "do not ask GitHub before" time of one home.

    Invariant: the wait it reports is at most :data:`MAX_BACKOFF_SECONDS`
    from the caller's ``now``, whatever the file says (a file written by a
    clock that has since been set back, or by hand).

    Args:
        cache_dir: ``<home>/cache``.
    """

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / BACKOFF_NAME

    def not_before(self, now: float) -> float | None:
        """The stored time, at most an hour after ``now``; ``None`` if none (or damaged)."""
        payload = read_cache(self.path, warn=warn_state)  # a damaged one is set aside and rebuilt
        if not isinstance(payload, dict):
            return None
        value, stored_at = number(payload, "not_before"), number(payload, "stored_at")
        if value is None or not math.isfinite(value):
            return None
        if stored_at is not None and now < stored_at:
            return None  # the clock went back since: the stored wait no longer means anything
        return clamp_not_before(value, now)

    def set(self, not_before: float, reason: str, *, now: float) -> None:
        """Persist ``not_before`` (epoch seconds), at most an hour after ``now``."""
        payload = {"not_before": clamp_not_before(not_before, now), "stored_at": now, "reason": reason}
        try:
            write_record(self.path, payload)
        except OSError as exc:
            _not_saved(exc)

    def clear(self) -> None:
        """Forget the backoff (GitHub answered normally)."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            _not_saved(exc)


def _not_saved(exc: OSError) -> None:
    """Warn that the back-off could not be stored: it only spares quota, so no verb fails on it."""
    get_logger("llama_runtime.state").warning(
        f"Could not update {exc.filename or BACKOFF_NAME} ({exc.strerror or exc}); the rate-limit wait is not saved."
    )
