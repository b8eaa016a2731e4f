"""The one way a request leaves the updater: built, sent, redirected, retried and read under one set of rules.

python-tuf's ``_fetch`` and httpx's transport are the model: every source (the GitHub API, its CDN,
a directory mirror, a bundle URL, an OCI registry's metadata, blobs, uploads and tokens) sends
through :class:`Session`, so a fault, a redirect or a hostile server gets the same answer
whichever source it comes from.

Invariants:
    * Every request carries one User-Agent (:func:`~.identity.user_agent`).
    * Redirects are walked here, hop by hop (at most :data:`MAX_REDIRECTS`); credentials are asked of
      the caller's :class:`Credentials` for each hop's URL, so they never follow a redirect to another
      origin, and a redirect from HTTPS to anything else is refused.
    * Idempotent requests (and those the caller declares safe to repeat) are tried again on connection
      failures, 5xx and 429, after the backoff or the server's ``Retry-After``, whichever is longer;
      no wait outlasts the session's :class:`~runtime.clock.TimeBudget`, and no try starts that it
      cannot hold. A 429 without a short ``Retry-After`` is returned at once: the caller reports it
      as a rate limit (:func:`~.limits.rate_limit_refusal`), which the next scheduled check honours.
    * No ``httpx`` exception leaves: failures are ``runtime.errors`` types naming the origin, never a
      URL's query or user information; an untrusted certificate gets the one TLS hint.
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

import httpx

from llama_runtime.runtime.clock import (
    MIN_TRY_SECONDS,
    RETRY_ATTEMPTS,
    SYSTEM_CLOCK,
    Clock,
    TimeBudget,
    backoff_seconds,
)
from llama_runtime.runtime.errors import NetworkError, RateLimitError, RemoteError
from llama_runtime.updater.net.body import API_BODY_DEADLINE_SECONDS, MAX_API_BODY_BYTES, read_capped, too_slow
from llama_runtime.updater.net.identity import user_agent
from llama_runtime.updater.net.limits import MAX_RETRY_WAIT_SECONDS, RateLimit, retry_after_seconds
from llama_runtime.updater.net.origin import may_carry_credentials, origin_of, same_origin
from llama_runtime.updater.net.tls import TLS_TRUST_HINT, is_untrusted_certificate

__all__ = [
    "IDEMPOTENT_METHODS",
    "MAX_REDIRECTS",
    "Credentials",
    "NoCredentials",
    "OriginCredential",
    "Session",
    "connection_pool",
]

#: Redirects followed per request: GitHub uses two hops (github.com, then its CDN), a registry one.
MAX_REDIRECTS: Final[int] = 5
#: Methods that may be sent again without asking (RFC 9110 §9.2.2).
IDEMPOTENT_METHODS: Final[frozenset[str]] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
#: Request headers that hold secrets of one origin: never carried to another by a redirect.
_ORIGIN_BOUND_HEADERS: Final[frozenset[str]] = frozenset({"authorization", "proxy-authorization", "cookie"})
_REDIRECT_STATUSES: Final[frozenset[int]] = frozenset({301, 302, 303, 307, 308})
#: Shortest wait for one read (seconds): 0 would mean "never wait" to the socket layer.
MIN_READ_SECONDS: Final[float] = 0.001


def connection_pool(
    *,
    timeout: httpx.Timeout,
    verify: ssl.SSLContext | bool,
    transport: httpx.BaseTransport | None = None,
    mounts: Mapping[str, httpx.BaseTransport] | None = None,
) -> httpx.Client:
    """The one way a pool is made: the TLS trust given (:func:`~.tls.ssl_context`), the proxy variables
    honoured (httpx's ``trust_env``), nothing followed by itself (redirects are :class:`Session`'s)."""
    return httpx.Client(
        transport=transport,
        mounts=dict(mounts) if mounts else None,
        timeout=timeout,
        verify=verify,
        follow_redirects=False,
        headers={"User-Agent": user_agent()},
    )


class Credentials(Protocol):
    """What a request to one URL may carry: headers only for the origin they are bound to."""

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """The ``Authorization`` (or nothing) ``url`` may carry."""
        ...


class NoCredentials:
    """Nothing, for every URL (a CDN, a bundle URL, a public mirror)."""

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """Nothing."""
        return {}


@dataclass(frozen=True)
class OriginCredential:
    """An ``Authorization`` value bound to the origin of ``bound_to``.

    It goes to that origin only (scheme, host and port, default ports normalised), and only over
    TLS or to this machine: a secret never crosses a network in clear text.

    Attributes:
        bound_to: A URL of the origin the credential belongs to.
        authorization: The header's value (``Bearer …``, ``Basic …``); never logged.
    """

    bound_to: str
    authorization: str

    def __repr__(self) -> str:
        return f"OriginCredential(bound_to={str(origin_of(self.bound_to))!r})"

    def auth_headers_for(self, url: str) -> dict[str, str]:
        """``Authorization`` for ``url`` on the bound origin over a safe channel; else nothing."""
        if same_origin(url, self.bound_to) and may_carry_credentials(url):
            return {"Authorization": self.authorization}
        return {}


_NONE: Final = NoCredentials()


@dataclass(frozen=True)
class _OwnDeadline:
    """A call's deadline below the budget: its length in seconds, and when (``clock.monotonic()``) it passes."""

    seconds: float
    give_up_at: float


@dataclass(frozen=True)
class _Ask:
    """What one request sends, whichever URL a redirect leads it to."""

    method: str
    headers: Mapping[str, str]
    content: bytes | None
    stream: bool


class _TryFailed(Exception):
    """One try failed in a way another may cure; ``error`` is what the person reads if none does."""

    def __init__(self, error: NetworkError) -> None:
        super().__init__(error.message)
        self.error = error


class Session:
    """A connection pool and the rules every request through it follows.

    Args:
        http: The pool (its timeouts, TLS trust and transport); closed by :meth:`close`.
        who: How messages name the server side (``the API``, ``the registry reg.example``);
            the origin of the failing URL is added to it.
        budget: The one overall deadline of the command's requests (default: none).
        attempts: Tries for an idempotent request (the project's one schedule, runtime.clock).
        sleep: The wait between tries (a fake clock's in tests).
        clock: Where deadlines read time.
        deadline_name: The setting that bounds ``budget`` (named when it runs out).
    """

    def __init__(
        self,
        http: httpx.Client,
        *,
        who: str = "the server",
        budget: TimeBudget | None = None,
        attempts: int = RETRY_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Clock = SYSTEM_CLOCK,
        deadline_name: str = "LLAMA_RUNTIME_API_DEADLINE",
    ) -> None:
        self.http = http
        self.who = who
        self.budget = budget or TimeBudget(math.inf, clock)
        self.attempts = attempts
        self.sleep = sleep
        self.clock = clock
        self.deadline_name = deadline_name
        self._held: tuple[float, str] | None = None  # (monotonic deadline, why): see hold
        #: The quota the last answer reported, as the source that reads its headers recorded it
        #: (``None``: none reported; a registry or a mirror sends none). The scheduler stays away
        #: after an answer that spent the last request, whichever source it came from.
        self.quota: RateLimit | None = None

    def hold(self, seconds: float, why: str) -> None:
        """Refuse every request for ``seconds`` with :class:`RateLimitError` saying ``why``.

        A rate-limit back-off an earlier refusal stored, from whichever server: asking again before
        it ends spends what the server said was gone (and a secondary limit grows with each ask).
        """
        self._held = (self.clock.monotonic() + seconds, why)

    def close(self) -> None:
        """Release the pool."""
        self.http.close()

    # -- sending ----------------------------------------------------------------------------------------------

    def send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        stream: bool = False,
        credentials: Credentials | None = None,
        repeatable: bool | None = None,
        attempts: int | None = None,
        follow_redirects: bool = True,
    ) -> httpx.Response:
        """The final answer to ``method url``: redirects walked, transient failures tried again.

        A 5xx or 429 that no further try may cure is returned for the caller to report.

        Args:
            repeatable: Whether the request may be sent again (default: the method is idempotent);
                an upload POST/PATCH the registry answers with a fresh location is, by its caller.
            attempts: Tries for this request (default: the session's; 1 for no retry).
            follow_redirects: Walk redirects (else a redirect is the answer: a pre-signed URL's host
                that redirects is not what was listed).

        Raises:
            RateLimitError: A stored back-off (:meth:`hold`) still runs: nothing was sent.
            NetworkError: No connection on any try, or the budget ran out.
            RemoteError: A redirect loop, or a redirect from HTTPS to another scheme.
        """
        if self._held is not None and (left := self._held[0] - self.clock.monotonic()) > 0:
            raise RateLimitError(self._held[1], retry_after=left, hint="Nothing was asked; nothing changed.")
        retry = method in IDEMPOTENT_METHODS if repeatable is None else repeatable
        tries = (attempts or self.attempts) if retry else 1
        creds = credentials or _NONE
        ask = _Ask(method, dict(headers or {}), content, stream)
        failed = 0
        with self.budget.spending():
            while True:
                try:
                    response = self._walk(ask, url, creds, follow_redirects)
                except _TryFailed as exc:
                    failed += 1
                    self._wait_or_raise(exc, failed, tries)
                    continue
                failed += 1
                wait = self._wait_before_retry(response, failed)
                if wait is None or failed >= tries or self.budget.left() <= wait + MIN_TRY_SECONDS:
                    return response
                response.close()
                self.sleep(wait)

    def fetch(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        credentials: Credentials | None = None,
        cap: int = MAX_API_BODY_BYTES,
        what: str,
        attempts: int | None = None,
        deadline_s: float | None = None,
    ) -> tuple[httpx.Response, bytes]:
        """A GET's (closed) answer and its decoded body, read under ``cap`` and the budget.

        A body that stalls or drops mid-transfer is tried again like a failed connection.
        ``deadline_s`` bounds the whole call (tries included) below the budget, for a file
        that is small by nature: one that drips past it is not tried again.

        Raises:
            NetworkError: As :meth:`send`, or the body outlasted what the budget had left.
            RemoteDataError: The body is larger than ``cap`` (the cap is in the message).
            RemoteError: As :meth:`send`.
        """
        tries = attempts or self.attempts
        own = None if deadline_s is None else _OwnDeadline(deadline_s, self.clock.monotonic() + deadline_s)
        failed = 0
        with self.budget.spending():
            while True:
                response = self.send("GET", url, headers=headers, stream=True, credentials=credentials, attempts=tries)
                try:
                    return response, self._read(response, url, what, cap, own)
                except _TryFailed as exc:
                    failed += 1
                    self._wait_or_raise(exc, failed, tries)
                finally:
                    response.close()

    def _wait_or_raise(self, failed_try: _TryFailed, failed: int, tries: int) -> None:
        """Wait the backoff before the next try, or raise what the person reads when no try is left."""
        if failed >= tries or not self.budget.allows_retry(failed):
            raise failed_try.error from failed_try.__cause__
        self.sleep(backoff_seconds(failed))

    def _wait_before_retry(self, response: httpx.Response, failed: int) -> float | None:
        """How long to wait before trying again after ``response``; ``None``: it is the answer.

        A 5xx waits the backoff (or its ``Retry-After``, if longer); a 429 is tried again only when it
        names a short wait: without one, or with a long one, it is a rate limit the caller records,
        because a tight retry loop only burns a quota.
        """
        status = response.status_code
        if status < 500 and status != 429:
            return None
        asked = retry_after_seconds(response, self.clock)
        if (status == 429 and asked is None) or (asked is not None and asked > MAX_RETRY_WAIT_SECONDS):
            return None
        return max(backoff_seconds(failed), asked or 0.0)

    # -- one try ----------------------------------------------------------------------------------------------

    def _walk(self, ask: _Ask, url: str, credentials: Credentials, follow: bool) -> httpx.Response:
        """One try: the request and the redirects it is answered with, credentials asked per hop."""
        first = url
        for _hop in range(MAX_REDIRECTS + 1):
            if not same_origin(url, first):  # whatever the caller put in its headers stays on its origin
                kept = {k: v for k, v in ask.headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS}
                ask = _Ask(ask.method, kept, ask.content, ask.stream)
            response = self._send_once(ask, url, credentials)
            if not follow or response.status_code not in _REDIRECT_STATUSES or ask.method not in ("GET", "HEAD"):
                return response
            location = response.headers.get("location", "")
            response.close()
            try:
                target = str(httpx.URL(url).join(location))
            except httpx.InvalidURL:
                raise RemoteError(f"{_cap_first(self._who(url))} redirected to something that is not a URL.") from None
            if origin_of(url).scheme == "https" and origin_of(target).scheme != "https":
                raise RemoteError(
                    f"{_cap_first(self._who(url))} redirected to a {origin_of(target).scheme or 'relative'}:// URL "
                    "from HTTPS; that was refused."
                )
            url = target
        raise RemoteError(f"{_cap_first(self._who(url))} redirected in a loop: more than {MAX_REDIRECTS} redirects.")

    def _send_once(self, ask: _Ask, url: str, credentials: Credentials) -> httpx.Response:
        left = self.budget.left()
        if left <= 0:
            raise _TryFailed(self._no_time_left(url))
        sent = {"User-Agent": user_agent(), **ask.headers, **credentials.auth_headers_for(url)}
        timeout = _clipped(self.http.timeout, left)
        try:
            request = self.http.build_request(ask.method, url, headers=sent, content=ask.content, timeout=timeout)
            return self.http.send(request, stream=ask.stream, follow_redirects=False)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _TryFailed(self._could_not_connect(url, exc)) from exc
        except httpx.ReadTimeout as exc:
            bound_by = (
                self.deadline_name if left <= (self.http.timeout.read or math.inf) else "LLAMA_RUNTIME_READ_TIMEOUT"
            )
            raise _TryFailed(self._no_answer(url, timeout.read or left, bound_by)) from exc
        except httpx.UnsupportedProtocol as exc:
            raise RemoteError(
                f"{_cap_first(self._who(url))} cannot be reached: {origin_of(url).scheme}:// is not HTTP."
            ) from exc
        except httpx.InvalidURL as exc:
            raise RemoteError(f"{_cap_first(self._who(url))} cannot be reached: the URL is not valid.") from exc
        except httpx.HTTPError as exc:
            raise _TryFailed(self._dropped(url, exc)) from exc

    def _read(self, response: httpx.Response, url: str, what: str, cap: int, own: _OwnDeadline | None) -> bytes:
        """``response``'s body under the cap and what the budget (or the call's own deadline) has left."""
        deadline = min(API_BODY_DEADLINE_SECONDS, max(self.budget.left(), 0.0))
        by_budget = deadline < API_BODY_DEADLINE_SECONDS
        own_left = None if own is None else max(own.give_up_at - self.clock.monotonic(), 0.0)
        by_own = own_left is not None and own_left < deadline
        deadline = own_left if by_own and own_left is not None else deadline
        _shorten_body_reads(response, deadline)
        try:
            return read_capped(response, cap=cap, what=what, deadline_s=deadline, clock=self.clock)
        except (NetworkError, httpx.ReadTimeout) as exc:  # read_capped's NetworkError: past its deadline
            if by_own and own is not None:  # the call's own deadline is spent: no further try
                raise too_slow(what, own.seconds) from exc
            stalled = deadline if isinstance(exc, NetworkError) else min(deadline, self.http.timeout.read or math.inf)
            raise _TryFailed(self._too_slow(url, stalled, by_budget=by_budget)) from exc
        except httpx.HTTPError as exc:
            raise _TryFailed(self._dropped(url, exc)) from exc

    # -- messages ---------------------------------------------------------------------------------------------

    def _who(self, url: str) -> str:
        return f"{self.who} at {origin_of(url)}"

    def _could_not_connect(self, url: str, exc: httpx.HTTPError) -> NetworkError:
        if is_untrusted_certificate(exc):
            return NetworkError(
                f"Could not connect to {self._who(url)}: its TLS certificate is not trusted here.", hint=TLS_TRUST_HINT
            )
        return NetworkError(
            f"Could not connect to {self._who(url)} ({type(exc).__name__}); check the network connection and try again."
        )

    def _no_answer(self, url: str, seconds: float, bound_by: str) -> NetworkError:
        return NetworkError(
            f"{_cap_first(self._who(url))} accepted the connection but sent no answer within {round(seconds, 1):g} s; "
            f"it may be overloaded or a proxy may be holding the request. Try again later, or raise {bound_by}."
        )

    def _too_slow(self, url: str, seconds: float, *, by_budget: bool) -> NetworkError:
        deadline = f"the {self.deadline_name} deadline" if by_budget else "the deadline of one answer"
        return NetworkError(
            f"{_cap_first(self._who(url))} answered too slowly: its answer did not arrive in full within "
            f"{round(seconds, 1):g} s, {deadline}. Try again later."
        )

    def _no_time_left(self, url: str) -> NetworkError:
        return NetworkError(
            f"{_cap_first(self._who(url))} used up the {self.budget.seconds:g} s deadline ({self.deadline_name}) "
            "of this command with slow or failing answers. Try again later."
        )

    def _dropped(self, url: str, exc: httpx.HTTPError) -> NetworkError:
        return NetworkError(
            f"Could not reach {self._who(url)}: {type(exc).__name__}; check the network connection and try again."
        )


def _cap_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _shorten_body_reads(response: httpx.Response, seconds: float) -> None:
    """No single read of ``response``'s body may wait longer than ``seconds`` (what the budget has left).

    httpcore takes the body's read timeout from the request's ``timeout`` extension
    when the body is first read, so setting it now bounds a stall after the headers
    by what is left, not by a whole timeout taken when the request began.
    """
    waits = response.request.extensions.get("timeout")
    if isinstance(waits, dict):
        read = waits.get("read")
        waits["read"] = max(min(read, seconds) if isinstance(read, int | float) else seconds, MIN_READ_SECONDS)


def _clipped(timeout: httpx.Timeout, left: float) -> httpx.Timeout:
    """``timeout`` with no phase longer than ``left`` seconds."""

    def clip(phase: float | None) -> float:
        return left if phase is None else min(phase, left)

    return httpx.Timeout(
        connect=clip(timeout.connect), read=clip(timeout.read), write=clip(timeout.write), pool=clip(timeout.pool)
    )
