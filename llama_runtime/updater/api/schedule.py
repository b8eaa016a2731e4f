"""The scheduled check: its decisions (pure) and its rate-limit backoff state.

A fleet of machines running ``llama-runtime check`` from cron shares GitHub's
60 requests/hour per IP, so the check:

* spreads itself out (``--jitter``),
* asks conditionally (the ETag cache makes "nothing changed" a free 304),
* and, once GitHub says the quota is spent, persists a "not before" time and
  skips every run until then instead of hammering the API.

The decision itself (a strictly newer build of the same repository with an
asset for the same backend; never a downgrade) is the one update decision's,
:func:`~updater.choice.decide.decide` with ``mode="upgrade_only"``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.runtime.record import number, read_record, write_record

if TYPE_CHECKING:
    from llama_runtime.runtime.errors import RateLimitError
    from llama_runtime.updater.sources.source import RateLimit

BACKOFF_NAME: Final = "ratelimit.json"
# GitHub: without retry-after or a reset time, "wait for at least one minute".
DEFAULT_BACKOFF_SECONDS: Final[float] = 60.0
# GitHub's primary rate limit is counted per hour, so no honest answer asks us
# to wait longer; a longer wait comes from a skewed clock or a bogus header
# and would silently disable every check for days.
MAX_BACKOFF_SECONDS: Final[float] = 3600.0
# A jitter beyond a day is a typo, not a fleet-spreading strategy.
MAX_JITTER_SECONDS: Final[float] = 24 * 3600.0
_DURATION: Final = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[smh]?)$")
_UNIT_SECONDS: Final[dict[str, float]] = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class CheckResult:
    """The answer of the scheduled check.

    Attributes:
        installed: Tag of the active runtime, or ``None`` when nothing is installed.
        latest: The build tag the channel calls latest, or ``None`` when the check was skipped.
        latest_version: The semver release (``v0.3.0``) that build was reached through, if any.
        update_available: A strictly newer build for the same repo and backend exists.
        applied: The update was installed by this check (``--apply``).
        skipped: ``"rate_limited"`` when a stored backoff says not to ask yet.
        not_before: Epoch seconds before which the next check will skip, if any.
        reason: Why ``update_available`` is what it is, for people.
        outcome: The ``update`` object when ``applied``.
        problem: What is wrong with the active runtime (e.g. a damaged binary),
            or ``None``; the decision still compares against its recorded tag.
        warnings: Releases passed over to find ``latest``, and why (a stable
            release still being cut, a build still uploading), for people.
    """

    installed: str | None
    latest: str | None
    update_available: bool
    latest_version: str | None = None
    applied: bool = False
    skipped: str | None = None
    not_before: float | None = None
    reason: str = ""
    outcome: dict[str, Any] | None = None
    problem: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``check`` object of the CLI contract."""
        return asdict(self)


def parse_duration(text: str) -> float:
    """Seconds in ``"90"``, ``"30s"``, ``"10m"`` or ``"1.5h"``.

    Raises:
        UserInputError: Not a duration of at most 24 hours.
    """
    match = _DURATION.match(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise UserInputError(f"Malformed duration {text!r}; use a number with s, m or h, e.g. '10m'.")
    seconds = float(match["n"]) * _UNIT_SECONDS[match["unit"]]
    if seconds > MAX_JITTER_SECONDS:
        raise UserInputError(f"Duration {text!r} is longer than 24 hours; use at most '24h'.")
    return seconds


def validate_seconds(value: float, what: str) -> float:
    """``value`` if it is a finite number of seconds, 0 or more.

    Raises:
        UserInputError: NaN, infinite or negative (``what`` names the option).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UserInputError(f"Invalid {what} {value!r}; use a finite number of seconds, 0 or more.")
    return float(value)


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
        try:
            payload = read_record(self.path)
        except (OSError, ValueError):
            return None
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
        write_record(self.path, {"not_before": clamp_not_before(not_before, now), "stored_at": now, "reason": reason})

    def clear(self) -> None:
        """Forget the backoff (GitHub answered normally)."""
        self.path.unlink(missing_ok=True)
