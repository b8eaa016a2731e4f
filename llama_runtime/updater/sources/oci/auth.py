"""Registry credentials, and the challenges that ask for them, as container tools handle both.

Where a credential comes from, first found wins: the tool's own variables
(``LLAMA_RUNTIME_REGISTRY_USERNAME`` and ``LLAMA_RUNTIME_REGISTRY_PASSWORD``),
then the auth file podman and skopeo read (``REGISTRY_AUTH_FILE``), then
Docker's ``config.json`` (``$DOCKER_CONFIG/config.json`` or
``~/.docker/config.json``): its ``credHelpers`` entry for the host, its
``auths`` entry, then its ``credsStore``. A helper is the program
``docker-credential-<name>`` asked ``get`` with the host on standard input.

The challenge grammar is RFC 7235 ``WWW-Authenticate``; the bearer flow is
distribution's token authentication (docs/spec/auth/token.md): ``GET realm?
service=…&scope=…`` with Basic credentials when there are any, answering
``{"token": …}`` or ``{"access_token": …}``.

Bearer tokens earned for a repository are kept in the home (:class:`JsonFileTokenCache`) until
shortly before they expire, so a repeated ``check`` is one request, not a 401, a token request
and a retry. A token is a short-lived grant of one scope, kept under the home's permissions like
the other caches; the credential that earned it is never written.

Invariants: a credential is only ever handed to the caller for its own
registry host; nothing here writes a credential or logs a secret.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock
from llama_runtime.runtime.errors import RegistryAuthError
from llama_runtime.runtime.fsutil import DamagedRecordError, parse_record, read_cache, read_record, write_record

__all__ = [
    "Challenge",
    "Credential",
    "JsonFileTokenCache",
    "RegistryAuthError",
    "TokenCache",
    "basic_header",
    "find_credential",
    "parse_challenge",
]

#: The tool's own credential variables (a CI job's secrets).
USER_VAR: Final = "LLAMA_RUNTIME_REGISTRY_USERNAME"
PASSWORD_VAR: Final = "LLAMA_RUNTIME_REGISTRY_PASSWORD"
#: Longest a credential helper may take (seconds): a desktop keychain prompt is not waited on for ever.
HELPER_TIMEOUT_SECONDS: Final[float] = 30.0
#: Largest auth file read (bytes): a config.json is a few KB.
_MAX_AUTH_FILE_BYTES: Final[int] = 1024 * 1024
#: A token's lifetime when the token service names none (seconds): distribution's token spec says
#: a client should assume 60 when ``expires_in`` is absent.
DEFAULT_TOKEN_SECONDS: Final[int] = 60
#: Margin before a token's expiry when it is no longer used (seconds): a request sent with it must
#: still arrive in time.
TOKEN_EXPIRY_MARGIN_SECONDS: Final[int] = 10
#: Most tokens kept (a fleet's few repositories); the oldest go first.
MAX_CACHED_TOKENS: Final[int] = 64
_PARAM: Final = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


@dataclass(frozen=True)
class Credential:
    """A user name and secret for one registry host.

    Attributes:
        username: The user (``<token>`` for an identity token).
        secret: The password or token; never logged or written.
        origin: Where it was found, for messages (a variable, a file, a helper).
    """

    username: str
    secret: str
    origin: str

    def __repr__(self) -> str:
        return f"Credential(username={self.username!r}, origin={self.origin!r})"


@dataclass(frozen=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge: its scheme and parameters (lower-case names)."""

    scheme: str
    params: Mapping[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """The first challenge of a ``WWW-Authenticate`` header; ``None`` when it is not one."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _PARAM.match(rest, pos)
        if match is None or match.end() == pos:
            break
        params[match.group(1).lower()] = match.group(2) if match.group(2) is not None else match.group(3)
        pos = match.end()
    return Challenge(scheme.lower(), params)


def basic_header(credential: Credential) -> str:
    """The ``Authorization`` value of HTTP Basic for ``credential``."""
    raw = f"{credential.username}:{credential.secret}".encode()
    return "Basic " + base64.b64encode(raw).decode("ascii")


def find_credential(host: str, env: Mapping[str, str] | None = None) -> Credential | None:
    """The credential for registry ``host`` (``host[:port]``), or ``None`` for anonymous access.

    Raises:
        RegistryAuthError: A configured helper is missing or failed.
    """
    env = os.environ if env is None else env
    user, password = env.get(USER_VAR), env.get(PASSWORD_VAR)
    if user and password:
        return Credential(user, password, f"{USER_VAR}/{PASSWORD_VAR}")
    for path in _auth_files(env):
        config = _read_config(path)
        if config is None:
            continue
        found = _from_config(config, host, path)
        if found is not None:
            return found
    return None


def _auth_files(env: Mapping[str, str]) -> list[Path]:
    files = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    docker = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path.home() / ".docker"
    files.append(docker / "config.json")
    return files


def _read_config(path: Path) -> dict[str, object] | None:
    try:
        data = read_record(path, max_bytes=_MAX_AUTH_FILE_BYTES)
    except (OSError, DamagedRecordError):
        return None
    return data if isinstance(data, dict) else None


def _from_config(config: dict[str, object], host: str, path: Path) -> Credential | None:
    helpers = config.get("credHelpers")
    if isinstance(helpers, dict) and isinstance(helpers.get(host), str):
        return _from_helper(str(helpers[host]), host)
    auths = config.get("auths")
    entry = _auth_entry(auths, host) if isinstance(auths, dict) else None
    if entry is not None:
        found = _decode_entry(entry, path)
        if found is not None:
            return found
    store = config.get("credsStore")
    return _from_helper(store, host) if isinstance(store, str) and store else None


def _auth_entry(auths: dict[str, object], host: str) -> dict[str, object] | None:
    # Docker writes keys as a bare host or as a URL (https://host/v1/): both name this host.
    for key, value in auths.items():
        bare = re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]
        if bare == host and isinstance(value, dict):
            return value
    return None


def _decode_entry(entry: dict[str, object], path: Path) -> Credential | None:
    token = entry.get("identitytoken")
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            user, sep, secret = base64.b64decode(auth, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if sep:
            if isinstance(token, str) and token:
                return Credential("<token>", token, str(path))
            return Credential(user, secret, str(path))
    if isinstance(token, str) and token:
        return Credential("<token>", token, str(path))
    return None


def _from_helper(name: str, host: str) -> Credential | None:
    program = f"docker-credential-{name}"
    try:
        done = subprocess.run(
            [program, "get"], input=host.encode(), capture_output=True, timeout=HELPER_TIMEOUT_SECONDS, check=False
        )
    except FileNotFoundError:
        raise RegistryAuthError(
            f"The credential helper {program} named for {host} in the Docker config is not installed.",
            hint=f"Install {program}, or remove it from config.json to pull anonymously.",
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryAuthError(f"The credential helper {program} failed for {host}: {type(exc).__name__}.") from None
    if done.returncode != 0:
        # The helper's "credentials not found in native keychain": anonymous access.
        if b"not found" in done.stdout.lower() + done.stderr.lower():
            return None
        raise RegistryAuthError(f"The credential helper {program} failed for {host} (exit {done.returncode}).")
    try:
        data = parse_record(done.stdout, what=f"the answer of {program}")
        return Credential(str(data["Username"]), str(data["Secret"]), program)
    except (DamagedRecordError, KeyError, TypeError):
        raise RegistryAuthError(f"The credential helper {program} answered {host} with something not JSON.") from None


class TokenCache(Protocol):
    """Where bearer tokens are kept between runs, each until shortly before it expires."""

    def get(self, key: str) -> str | None:
        """The token kept under ``key`` while it is still valid."""
        ...

    def put(self, key: str, token: str, lifetime: int | None) -> None:
        """Keep ``token`` under ``key`` for ``lifetime`` seconds (the token service's ``expires_in``)."""
        ...


class JsonFileTokenCache:
    """A :class:`TokenCache` in one JSON file of the home's cache, replaced atomically on each write.

    A file that cannot be read or written is no cache: the worst outcome is one more token request.
    """

    def __init__(self, path: Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self._clock = clock

    def get(self, key: str) -> str | None:
        """The token under ``key`` if it is valid for :data:`TOKEN_EXPIRY_MARGIN_SECONDS` more."""
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        token, until = entry.get("token"), entry.get("expires_at")
        if not isinstance(token, str) or not isinstance(until, int | float) or isinstance(until, bool):
            return None
        return token if self._clock.time() + TOKEN_EXPIRY_MARGIN_SECONDS < until else None

    def put(self, key: str, token: str, lifetime: int | None) -> None:
        """Keep ``token`` until ``lifetime`` (default :data:`DEFAULT_TOKEN_SECONDS`) from now."""
        now = self._clock.time()
        seconds = DEFAULT_TOKEN_SECONDS if lifetime is None or lifetime <= 0 else lifetime
        data = {k: v for k, v in self._load().items() if isinstance(v, dict) and _unexpired(v, now) and k != key}
        data[key] = {"token": token, "expires_at": now + seconds}
        for old in list(data)[: max(0, len(data) - MAX_CACHED_TOKENS)]:
            del data[old]
        try:
            write_record(self.path, data, mode=0o600)  # a grant, however short-lived: the owner only
        except OSError:
            return

    def _load(self) -> dict[str, object]:
        data = read_cache(self.path)
        return data if isinstance(data, dict) else {}


def _unexpired(entry: dict[str, object], now: float) -> bool:
    until = entry.get("expires_at")
    return isinstance(until, int | float) and not isinstance(until, bool) and until > now
