"""How a server's TLS certificate is trusted, as companies have it: GitHub, a mirror and a registry alike.

First found: ``--ca-bundle`` / ``LLAMA_RUNTIME_CA_BUNDLE`` (a PEM file of the
company's CAs), then ``SSL_CERT_FILE``/``SSL_CERT_DIR`` (OpenSSL's variables),
then the operating system's trust store through PyPI ``truststore`` (where an IT
department installs its TLS-inspecting proxy's or registry's CA) together with
certifi's bundle (httpx's default, so a machine whose OS store is empty, a slim
container, trusts what it trusted before). Proxies are httpx's ``trust_env``:
``HTTPS_PROXY``, ``NO_PROXY``. Pure of network IO: it builds a context.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Final

from llama_runtime.runtime.errors import UserInputError

__all__ = ["CA_BUNDLE_VAR", "TLS_TRUST_HINT", "is_untrusted_certificate", "ssl_context"]

#: The tool's own variable for a CA bundle (a PEM file); ``--ca-bundle`` is the same.
CA_BUNDLE_VAR: Final = "LLAMA_RUNTIME_CA_BUNDLE"
#: What a person does about a certificate this machine does not trust (every server alike).
TLS_TRUST_HINT: Final = (
    "Pass --ca-bundle (or set LLAMA_RUNTIME_CA_BUNDLE, or SSL_CERT_FILE) to the CA bundle it chains to "
    "(a TLS-inspecting proxy's CA), or install that CA in the operating system's trust store."
)


def is_untrusted_certificate(exc: BaseException) -> bool:
    """Whether a connection failed because the server's certificate chains to no trusted CA."""
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def ssl_context(env: Mapping[str, str] | None = None, *, ca_bundle: str | None = None) -> ssl.SSLContext | bool:
    """The TLS trust for HTTPS connections (``True``: httpx's default, certifi).

    Args:
        env: Where ``LLAMA_RUNTIME_CA_BUNDLE`` and OpenSSL's variables are read (default: the process's).
        ca_bundle: ``--ca-bundle``: wins over every variable.

    Raises:
        UserInputError: A configured CA bundle cannot be read as PEM certificates (exit 2).
    """
    env = os.environ if env is None else env
    if ca_bundle:
        return _from_file("--ca-bundle", ca_bundle)
    for var in (CA_BUNDLE_VAR, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        value = env.get(var, "").strip()
        if value:
            return _from_file(var, value)
    try:
        import truststore
    except ImportError:
        return True
    context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        import certifi

        context.load_verify_locations(certifi.where())  # never trust less than httpx did before
    except (ImportError, OSError, ssl.SSLError):
        pass
    return context


def _from_file(source: str, value: str) -> ssl.SSLContext:
    try:
        if source == "SSL_CERT_DIR":
            return ssl.create_default_context(capath=value)
        return ssl.create_default_context(cafile=value)
    except (OSError, ssl.SSLError) as exc:
        shown = f"{source} {value}" if source.startswith("--") else f"{source}={value}"
        raise UserInputError(
            f"{shown} is not a readable file of PEM certificates ({type(exc).__name__}).",
            hint="Point it at the CA bundle your server's certificate chains to.",
        ) from None
