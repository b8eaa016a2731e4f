"""How a registry's TLS certificate is trusted, as companies have it.

First found: ``LLAMA_RUNTIME_CA_BUNDLE`` (a PEM file of the company's CAs),
then ``SSL_CERT_FILE``/``SSL_CERT_DIR`` (OpenSSL's variables), then the
operating system's trust store through PyPI ``truststore`` (where an IT
department installs its proxy's or registry's CA), else certifi's bundle
(httpx's default). Proxies are httpx's ``trust_env``: ``HTTPS_PROXY``,
``NO_PROXY``. Pure of network IO: it builds a context.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Final

from llama_runtime.runtime.errors import UserInputError

__all__ = ["CA_BUNDLE_VAR", "ssl_context"]

#: The tool's own variable for a CA bundle (a PEM file).
CA_BUNDLE_VAR: Final = "LLAMA_RUNTIME_CA_BUNDLE"


def ssl_context(env: Mapping[str, str] | None = None) -> ssl.SSLContext | bool:
    """The TLS trust for registry connections (``True``: httpx's default, certifi).

    Raises:
        UserInputError: A configured CA bundle cannot be read as PEM certificates (exit 2).
    """
    env = os.environ if env is None else env
    for var in (CA_BUNDLE_VAR, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        value = env.get(var, "").strip()
        if value:
            return _from_file(var, value)
    try:
        import truststore
    except ImportError:
        return True
    return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _from_file(var: str, value: str) -> ssl.SSLContext:
    try:
        if var == "SSL_CERT_DIR":
            return ssl.create_default_context(capath=value)
        return ssl.create_default_context(cafile=value)
    except (OSError, ssl.SSLError) as exc:
        raise UserInputError(
            f"{var}={value} is not a readable file of PEM certificates ({type(exc).__name__}).",
            hint="Point it at the CA bundle your registry's certificate chains to.",
        ) from None
