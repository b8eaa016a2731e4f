"""Which token goes where, and URLs with their credentials taken out.

The policy of the command-line contract:
    * ``GITHUB_TOKEN`` (then ``GH_TOKEN``) is a github.com credential: it is
      sent only when the API origin is exactly ``https://api.github.com``,
      never to a mirror, an Enterprise host or a test server;
    * ``LLAMA_RUNTIME_GITHUB_TOKEN`` is meant for the configured API origin:
      it is sent there when the origin is https, or plain http on a loopback
      address (a local mirror or test server), never in clear over a network;
    * no token ever leaves for a download host (see ``updater.sources.github``).

Every URL the tool prints or stores goes through :func:`redact_url`: user
information and query strings (signed CDN URLs carry a signature there) are
replaced, so a credential typed into ``--api-url`` never reaches a message,
a log line or ``jobs/current.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from llama_runtime.updater.net.origin import may_carry_credentials, same_origin

__all__ = [
    "GITHUB_API_ORIGIN",
    "checked_token",
    "may_send_token",
    "redact_library_logs",
    "redact_text",
    "redact_url",
    "split_user_info",
    "token_for",
    "url_record",
]

#: The only origin a github.com token (GITHUB_TOKEN / GH_TOKEN) is sent to.
GITHUB_API_ORIGIN: Final[str] = "https://api.github.com"
_GITHUB_TOKEN_VARS: Final[tuple[str, ...]] = ("GITHUB_TOKEN", "GH_TOKEN")
_OWN_TOKEN_VAR: Final[str] = "LLAMA_RUNTIME_GITHUB_TOKEN"
# A URL inside free text (an error message from a library): scheme://… up to a blank or quote.
_URL_IN_TEXT: Final = r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+"
# What a token may hold: GitHub's are letters, digits and "_"; any visible ASCII is allowed,
# nothing that could end or fold an HTTP header line.
_TOKEN_TEXT: Final = r"^[\x21-\x7e]+$"


def may_send_token(api_url: str) -> bool:
    """Whether any token may go to ``api_url`` at all: https, or http on loopback."""
    return may_carry_credentials(api_url)


def token_names_for(api_url: str) -> str | None:
    """The variables whose token :func:`token_for` would send to ``api_url``, for hints; ``None``: none."""
    if not may_send_token(api_url):
        return None
    if same_origin(api_url, GITHUB_API_ORIGIN):
        return f"{_GITHUB_TOKEN_VARS[0]} (or {_GITHUB_TOKEN_VARS[1]}, or {_OWN_TOKEN_VAR})"
    return _OWN_TOKEN_VAR


def token_for(api_url: str, env: Mapping[str, str]) -> str | None:
    """The token the contract allows for ``api_url`` from ``env``, or ``None``.

    ``LLAMA_RUNTIME_GITHUB_TOKEN`` wins on its own origin; a github.com token
    is used only for ``https://api.github.com``. Blank values count as unset.

    Reading never fails: a malformed token is refused by :func:`checked_token`
    when a request would carry it, so commands that send nothing (start-up,
    ``status``, ``server stop``) still work.
    """
    own = env.get(_OWN_TOKEN_VAR, "").strip()
    if own and may_send_token(api_url):
        return own
    if not same_origin(api_url, GITHUB_API_ORIGIN):
        return None
    for key in _GITHUB_TOKEN_VARS:
        value = env.get(key, "").strip()
        if value:
            return value
    return None


def checked_token(token: str) -> str:
    """``token``, if it can be sent as an HTTP header at all.

    Raises:
        UserInputError: It holds spaces, control characters (a pasted line break)
            or non-ASCII letters: it could never authenticate.
    """
    if re.match(_TOKEN_TEXT, token):
        return token
    from llama_runtime.runtime.errors import UserInputError

    # Never quote the token: a message may end up in a log or a job file.
    raise UserInputError(
        "The GitHub token (LLAMA_RUNTIME_GITHUB_TOKEN, GITHUB_TOKEN or GH_TOKEN) holds characters no token has "
        "(spaces, control characters such as a pasted line break, or non-ASCII letters); a GitHub token is one "
        "line of ASCII letters, digits and underscores.",
        hint="Set the variable again without the extra characters.",
    )


def split_user_info(url: str) -> tuple[str, str | None]:
    """``url`` without its user information, and that ``user:password`` (percent-decoded), if any.

    A password typed into ``--api-url`` (``https://user:TOKEN@mirror/…``) stays in
    memory as a header (:meth:`~updater.sources.github.GitHubClient.auth_headers_for`);
    the URL every request, record and message is built from never holds it.
    """
    from urllib.parse import unquote

    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    user_info, _, host = parts.netloc.rpartition("@")
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), unquote(user_info)


def redact_url(url: str) -> str:
    """``url`` without user information and without its query string.

    ``https://user:secret@host/x?sig=abc`` becomes ``https://host/x?…``. Text that does not
    parse as an absolute URL (a relative ``bundle_url``, ``https://[::1/x?sig=…``) still loses
    everything from its first ``?`` or ``#`` and anything before an ``@``: a signature or a
    password is never shown because its URL was odd.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_unparsed(url)
    if not parts.scheme or not parts.netloc:
        return _redact_unparsed(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    query = "…" if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def _redact_unparsed(text: str) -> str:
    """``text`` cut at its first ``?`` or ``#`` (marked ``?…``), with user information dropped."""
    cut = min((i for i in (text.find("?"), text.find("#")) if i >= 0), default=-1)
    head = text if cut < 0 else text[:cut] + "?…"
    scheme, sep, rest = head.partition("://")
    authority, slash, path = rest.partition("/")
    if sep and "@" in authority:
        return f"{scheme}{sep}{authority.rsplit('@', 1)[1]}{slash}{path}"
    return head


def url_record(url: str) -> str:
    """``url`` as a state file stores it: exact enough to compare, with no credential in it.

    A URL with user information or a query string (a mirror's signed link) is kept
    as its :func:`redact_url` form plus a short sha256 of the whole URL: two records
    compare equal exactly when the URLs do, and the file holds no secret. Any other
    URL is kept as it is.
    """
    redacted = redact_url(url)
    if redacted == url:
        return url
    import hashlib

    return f"{redacted} (sha256:{hashlib.sha256(url.encode()).hexdigest()[:16]})"


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    return re.sub(_URL_IN_TEXT, lambda m: redact_url(m.group()), text)


# The standard-library loggers of the HTTP stack that name URLs: httpx logs every request's full
# URL at INFO ("HTTP Request: GET https://…?sig=…", httpx/_client.py), which an application that
# embeds this package and turns on INFO logging would print, signature included. (httpcore's
# DEBUG lines name hosts and ports, never a path or query.)
_HTTP_LIBRARY_LOGGERS: Final[tuple[str, ...]] = ("httpx",)


def _redact_record(record: object) -> bool:
    """A logging filter: rewrites the record's message with :func:`redact_text`, never drops it."""
    import logging

    if isinstance(record, logging.LogRecord):
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
    return True


def redact_library_logs() -> None:
    """Redact URLs in what the HTTP libraries log, at every level (idempotent).

    Signed CDN redirects and pre-signed attestation ``bundle_url`` values carry
    their credential in the query string; our own log lines pass URLs through
    :func:`redact_url`, this covers the lines httpx writes itself. (``logging``
    is imported here, not at start-up: ``status`` never loads it.)
    """
    import logging

    for name in _HTTP_LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _redact_record not in logger.filters:
            logger.addFilter(_redact_record)
