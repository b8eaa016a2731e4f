"""A registry client for an ``oci://`` URL: its connection pool and the credential for its host."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Final

import httpx

from llama_runtime.runtime.clock import SYSTEM_CLOCK, Clock, TimeBudget
from llama_runtime.updater.net.session import connection_pool
from llama_runtime.updater.net.tls import ssl_context
from llama_runtime.updater.sources.oci.auth import TokenCache, find_credential
from llama_runtime.updater.sources.oci.client import RegistryClient
from llama_runtime.updater.sources.oci.reference import parse_reference

__all__ = ["open_registry", "registry_client"]

#: Connect timeout (seconds): a dead registry should fail fast, as a dead GitHub does.
CONNECT_TIMEOUT_SECONDS: Final[float] = 10.0
#: Read timeout when the caller gives none (seconds).
READ_TIMEOUT_SECONDS: Final[float] = 60.0


def registry_client(
    url: str,
    *,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    mounts: dict[str, httpx.BaseTransport] | None = None,
    ca_bundle: str | None = None,
    deadline: float | None = None,
    clock: Clock = SYSTEM_CLOCK,
    sleep: Callable[[float], None] = time.sleep,
    tokens: TokenCache | None = None,
) -> RegistryClient:
    """A client for the repository ``url`` names; the caller closes ``client.http``.

    TLS trusts what :func:`~llama_runtime.updater.net.tls.ssl_context` says (a CA bundle, the OS trust store);
    the proxy variables (``HTTPS_PROXY``, ``NO_PROXY``) are honoured (httpx's ``trust_env``).
    ``deadline`` (the settings' API deadline) bounds all its requests together, retries included.

    Raises:
        UserInputError: ``url`` is not a registry reference.
        RegistryAuthError: A configured credential helper is missing or failed.
    """
    ref = parse_reference(url)
    timeout = httpx.Timeout(read_timeout, connect=min(CONNECT_TIMEOUT_SECONDS, read_timeout))
    verify = True if ref.plain_http else ssl_context(ca_bundle=ca_bundle)
    http = connection_pool(timeout=timeout, mounts=mounts, verify=verify)
    budget = TimeBudget(deadline, clock) if deadline is not None else None
    return RegistryClient(ref, http, find_credential(ref.host), budget=budget, clock=clock, sleep=sleep, tokens=tokens)


@contextlib.contextmanager
def open_registry(
    url: str,
    *,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    ca_bundle: str | None = None,
    deadline: float | None = None,
    tokens: TokenCache | None = None,
) -> Iterator[RegistryClient]:
    """:func:`registry_client`, closed on exit."""
    client = registry_client(url, read_timeout=read_timeout, ca_bundle=ca_bundle, deadline=deadline, tokens=tokens)
    try:
        yield client
    finally:
        client.http.close()
