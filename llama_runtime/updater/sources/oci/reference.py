"""Where a repository lives in an OCI registry: ``oci://HOST[:PORT]/NS/NAME[:TAG|@sha256:HEX]``, parsed.

The grammar follows the distribution-spec's ``<name>`` (path components of
``[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*`` joined by ``/``), its tag
(``[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}``) and image-spec's digest grammar
restricted to sha256 (the only algorithm the spec requires of registries).
Pure: no IO.

Invariant: a registry is spoken to over HTTPS, except a loopback host (a
registry on this machine) or an ``oci+http://`` reference, which asks for
plain HTTP explicitly; ``oci+https://`` asks for TLS even on loopback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from llama_runtime.runtime.errors import UserInputError
from llama_runtime.updater.net.origin import OCI_SCHEMES, is_loopback_host

__all__ = ["Reference", "parse_reference", "valid_tag"]

# distribution-spec "Pulling manifests": <name> and <reference> grammars.
_NAME_COMPONENT: Final = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*")
_TAG: Final = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}")
_DIGEST: Final = re.compile(r"sha256:[a-f0-9]{64}")
_HOST: Final = re.compile(r"[A-Za-z0-9.-]+(?::[0-9]{1,5})?|\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?")
#: Longest repository name accepted (characters): distribution caps ``<name>`` at 255 with its host.
_MAX_NAME_CHARS: Final[int] = 255


@dataclass(frozen=True)
class Reference:
    """A repository in a registry, and optionally a tag and/or a manifest digest in it.

    Attributes:
        host: ``host[:port]`` as written.
        name: The repository (``namespace/name``).
        tag: A tag, if one was given.
        digest: ``sha256:<hex>``, if one was given (a pin).
        plain_http: Spoken to without TLS (loopback, or ``oci+http://``).
    """

    host: str
    name: str
    tag: str | None = None
    digest: str | None = None
    plain_http: bool = False

    @property
    def base_url(self) -> str:
        """``https://host[:port]`` (``http://`` for :attr:`plain_http`)."""
        return f"{'http' if self.plain_http else 'https'}://{self.host}"

    @property
    def repository_url(self) -> str:
        """The repository's ``/v2/<name>`` URL."""
        return f"{self.base_url}/v2/{self.name}"

    @property
    def display(self) -> str:
        """``oci://host/name`` (no tag): how messages and the marker name the repository.

        ``oci+http://`` when plain HTTP crosses a network, so no message hides that the channel is clear text.
        """
        clear = self.plain_http and not is_loopback_host(_bare_host(self.host))
        return f"{'oci+http' if clear else 'oci'}://{self.host}/{self.name}"


def valid_tag(tag: str) -> bool:
    """Whether ``tag`` is a tag the distribution-spec allows."""
    return _TAG.fullmatch(tag) is not None


def parse_reference(url: str) -> Reference:
    """``url`` as a :class:`Reference`.

    Raises:
        UserInputError: ``url`` is not ``oci://HOST[:PORT]/NS/NAME[:TAG][@sha256:HEX]`` (exit 2).
    """
    scheme = next((s for s in OCI_SCHEMES if url.startswith(s)), None)
    if scheme is None:
        raise _bad(url, "it does not start with oci://")
    rest = url[len(scheme) :].rstrip("/")
    host, _, path = rest.partition("/")
    if not _HOST.fullmatch(host) or not path:
        raise _bad(url, "it names no HOST[:PORT]/NAMESPACE/NAME")
    path, _, digest = path.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise _bad(url, "the part after @ is not sha256:<64 lowercase hex digits>")
    last = path.rsplit("/", 1)[-1]
    tag = None
    if ":" in last:
        path, _, tag = path.rpartition(":")
        if not valid_tag(tag):
            raise _bad(url, f"{tag!r} is not a tag (letters, digits, '_', '.', '-'; up to 128)")
    components = path.split("/")
    if len(path) > _MAX_NAME_CHARS or not all(_NAME_COMPONENT.fullmatch(c) for c in components):
        raise _bad(url, "the repository name must be lowercase letters and digits separated by '.', '_', '-' or '/'")
    # oci+https://: TLS always, even on loopback.
    plain = scheme == "oci+http://" or (scheme == "oci://" and is_loopback_host(_bare_host(host)))
    return Reference(host=host, name=path, tag=tag, digest=digest or None, plain_http=plain)


def _bare_host(host: str) -> str:
    """``host[:port]`` without its port (and an IPv6 address without brackets)."""
    return host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]", 1)[0]


def _bad(url: str, why: str) -> UserInputError:
    return UserInputError(
        f"{url[:200]!r} is not a registry reference: {why}.",
        hint="Write oci://HOST[:PORT]/NAMESPACE/NAME, e.g. oci://registry.example.com/llama/llama.cpp "
        "(oci+http:// for a registry without TLS).",
    )
