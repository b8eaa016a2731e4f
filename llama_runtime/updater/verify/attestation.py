"""The cryptographic half of provenance: sigstore-python verifies one Sigstore bundle.

Imported only when an attestation has to be checked (sigstore's import costs
~0.3 s and ~60 MB of dependencies; ``status`` never pays it).

What one :func:`verify_bundle` checks, in this order (sigstore's
``Verifier.verify_dsse`` does 1-5, this module 6):

1. the bundle parses and is complete (certificate, transparency-log entry);
2. the signing certificate chains to a Fulcio CA of the trust root and was
   valid when the log (or a timestamp authority) saw the signature, with a
   valid SCT from a CT log of the trust root;
3. the certificate's identity satisfies the signer policy
   (:func:`~updater.verify.signer.policy_violation`);
4. the log entry's inclusion proof and signed checkpoint verify against a
   Rekor key of the trust root, and the entry matches the envelope;
5. the DSSE envelope's signature verifies with the certificate's key;
6. the signed statement is SLSA provenance whose subject is this file's sha256.

The trust root: Sigstore's production ``trusted_root.json``, refreshed through
sigstore's TUF client (signed metadata from tuf-repo-cdn.sigstore.dev, cached
in the user's cache directory); offline, the cached copy of the last refresh,
or on a machine that never refreshed the copy shipped inside the sigstore
wheel. ``LLAMA_RUNTIME_TRUSTED_ROOT=FILE`` replaces all of that with one file.
Verification never silently skips: a trust root that cannot verify a bundle
fails it (exit 8) and the message says which trust root was used.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import LlamaRuntimeError, ProvenanceError, UserInputError
from llama_runtime.updater.verify.signer import (
    EXT_BUILD_SIGNER_URI,
    OID_PREFIX,
    Signer,
    SignerPolicy,
    policy_violation,
    signer_from_extensions,
    statement_violation,
)

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.models import TrustedRoot

__all__ = ["SigstoreMissingError", "TrustRoot", "load_trust_root", "verify_bundle"]

_IN_TOTO_PAYLOAD: Final = "application/vnd.in-toto+json"
_REFRESH_HINT: Final = (
    "If this machine's Sigstore trust root is out of date, run one update with network access "
    "(it refreshes the trust root), or set LLAMA_RUNTIME_TRUSTED_ROOT to a current trusted_root.json."
)
# The last arcs of the Fulcio extensions a signer is read from (DER UTF8String values).
_SIGNER_ARCS: Final = (8, 9, 12, 13, 14, 20, 21)


class SigstoreMissingError(LlamaRuntimeError):
    """sigstore-python is not importable here (a trimmed or vendored install)."""


@dataclass(frozen=True)
class TrustRoot:
    """A loaded Sigstore trust root and how it was obtained."""

    root: TrustedRoot
    description: str
    hint: str = _REFRESH_HINT


def _sigstore_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("sigstore")
    except metadata.PackageNotFoundError:
        return "?"


def load_trust_root(path: Path | None, *, offline: bool) -> TrustRoot:
    """The trust root to verify with.

    Args:
        path: An explicit ``trusted_root.json`` (``LLAMA_RUNTIME_TRUSTED_ROOT``).
        offline: Use the cached or shipped production root without a refresh.

    Raises:
        SigstoreMissingError: sigstore-python is not installed.
        UserInputError: ``path`` is not a readable Sigstore trusted root.
    """
    try:
        from sigstore.models import ClientTrustConfig, TrustedRoot
    except ImportError as exc:
        raise SigstoreMissingError(
            f"sigstore-python is not installed ({exc}); install llama-runtime-updater with its dependencies"
        ) from None
    if path is not None:
        try:
            return TrustRoot(TrustedRoot.from_file(str(path)), f"the trust root {path} (LLAMA_RUNTIME_TRUSTED_ROOT)")
        except (OSError, ValueError) as exc:
            raise UserInputError(
                f"LLAMA_RUNTIME_TRUSTED_ROOT={path} is not a readable Sigstore trusted_root.json ({exc})."
            ) from None
    # sigstore logs "offline mode" at WARNING through the root logger; our own message says it better.
    logging.getLogger("sigstore").setLevel(logging.ERROR)
    shipped = f"sigstore {_sigstore_version()}"
    if not offline:
        try:
            root = ClientTrustConfig.production(offline=False).trusted_root
            return TrustRoot(root, "Sigstore's production trust root, refreshed now through TUF")
        except Exception as exc:  # sigstore raises TUFError, requests/OS errors …: all mean "no refresh"
            reason = f"the refresh failed: {type(exc).__name__}"
    else:
        reason = "offline: not refreshed"
    root = ClientTrustConfig.production(offline=True).trusted_root
    return TrustRoot(root, f"Sigstore's production trust root as last refreshed or shipped with {shipped} ({reason})")


def _der_utf8(value: bytes) -> str:
    """A DER UTF8String's text; Fulcio's older extensions hold raw UTF-8 instead."""
    if len(value) >= 2 and value[0] == 0x0C:
        length, start = value[1], 2
        if length & 0x80:
            size = length & 0x7F
            length, start = int.from_bytes(value[2 : 2 + size], "big"), 2 + size
        return value[start : start + length].decode("utf-8", "replace")
    return value.decode("utf-8", "replace")


def signer_of(cert: Certificate) -> Signer:
    """The signer a Fulcio certificate names."""
    from cryptography.x509 import ObjectIdentifier, UnrecognizedExtension

    values: dict[int, str] = {}
    for arc in _SIGNER_ARCS:
        try:
            ext = cert.extensions.get_extension_for_oid(ObjectIdentifier(f"{OID_PREFIX}{arc}")).value
        except Exception:  # ExtensionNotFound: the policy refuses what is missing
            continue
        if isinstance(ext, UnrecognizedExtension):
            values[arc] = _der_utf8(ext.value)
    if EXT_BUILD_SIGNER_URI not in values:
        values[EXT_BUILD_SIGNER_URI] = ""
    return signer_from_extensions(values)


class _SignerPolicy:
    """sigstore's VerificationPolicy protocol (``verify(cert)``) for our signer policy."""

    def __init__(self, policy: SignerPolicy) -> None:
        self.policy = policy

    def verify(self, cert: Certificate) -> None:
        from sigstore.errors import VerificationError

        violation = policy_violation(signer_of(cert), self.policy)
        if violation is not None:
            raise VerificationError(violation)


def verify_bundle(bundle: dict[str, Any], sha256: str, policy: SignerPolicy, trust: TrustRoot) -> Signer:
    """Verify one Sigstore bundle for the file ``sha256`` under ``policy``; returns its signer.

    Raises:
        ProvenanceError: Any check failed; the message says which.
    """
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle, InvalidBundle
    from sigstore.verify import Verifier

    try:
        parsed = Bundle.from_json(json.dumps(bundle))
    except (InvalidBundle, ValueError, TypeError, KeyError) as exc:
        raise ProvenanceError(f"not a valid Sigstore bundle ({_first_line(exc)})") from None
    try:
        payload_type, payload = Verifier(trusted_root=trust.root).verify_dsse(parsed, _SignerPolicy(policy))
    except SigstoreError as exc:
        raise ProvenanceError(_first_line(exc)) from None
    except ValueError as exc:  # malformed inner material (bad base64, an unparsable certificate …)
        raise ProvenanceError(f"the bundle is damaged ({_first_line(exc)})") from None
    if payload_type != _IN_TOTO_PAYLOAD:
        raise ProvenanceError(f"the signed payload is {payload_type!r}, not an in-toto statement")
    try:
        statement = json.loads(payload)
    except ValueError:
        statement = None
    violation = statement_violation(statement, sha256)
    if violation is not None:
        raise ProvenanceError(violation)
    return signer_of(parsed.signing_certificate)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
