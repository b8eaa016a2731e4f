"""Certificates shaped like Fulcio's for GitHub Actions, minted by a throwaway test CA.

The signer policy is a function of a certificate's Fulcio extensions alone
(issuer, Build Signer URI, Source Repository URI/Digest/Ref, trigger, run), so
a certificate that carries upstream's extensions proves the policy for
upstream's identities even though no real bundle with a ggml-org identity can
be had offline. These certificates chain to nothing Sigstore trusts: they prove
the *policy* (through :func:`updater.verify.signer.signer_of`), never the
cryptographic path, which the real staging bundle in tests/data/sigstore proves.

The extension values are DER UTF8Strings under 1.3.6.1.4.1.57264.1.N, as Fulcio
writes them (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md).
The two eras are upstream's (shared/reference/upstream-2026-10.md):

* ``release.yml`` era (about b10485 to b11300): signer
  ``…/.github/workflows/release.yml@refs/heads/master``, trigger ``push``
  (b11146, b11222 in third-party verification logs);
* ``release-publish.yml`` era (from about b11300): signer
  ``…/.github/workflows/release-publish.yml@refs/heads/master``, trigger
  ``workflow_run`` (b11424, attestation 52864580). Its Source Repository Digest
  starts ``c06f841`` (the real certificate's; the rest of the hex is filler),
  while the tag and the binary name ``6c59c40…``: the publisher's commit.

Run ids and the other commit hashes are filler of the right shape.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from functools import cache
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = [
    "PUBLISH_ERA",
    "RELEASE_ERA",
    "UPSTREAM",
    "FulcioIdentity",
    "der_utf8",
    "mint",
]

UPSTREAM: Final = "ggml-org/llama.cpp"
_ISSUER: Final = "https://token.actions.githubusercontent.com"
_ARC: Final = "1.3.6.1.4.1.57264.1."


@dataclass(frozen=True)
class FulcioIdentity:
    """The GitHub Actions identity one certificate names (what Fulcio puts in its extensions).

    Attributes:
        repository: Source Repository (``owner/name``), ext .12.
        workflow: The signing workflow's path; with ``signer_repository`` the Build Signer URI, ext .9.
        workflow_ref: The ref in the Build Signer URI (the workflow file's ref).
        source_ref: Source Repository Ref, ext .14.
        commit: Source Repository Digest, ext .13.
        trigger: Build Trigger, ext .20.
        run_id: The run in the Run Invocation URI, ext .21.
        signer_repository: Where the signing workflow lives (another repository: a reusable workflow).
        issuer: The OIDC issuer, ext .8.
    """

    repository: str
    workflow: str
    workflow_ref: str
    source_ref: str
    commit: str
    trigger: str
    run_id: int
    signer_repository: str | None = None
    issuer: str = _ISSUER

    def but(self, **changes: object) -> FulcioIdentity:
        """This identity with some fields changed (another repository, ref, workflow …)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def build_signer_uri(self) -> str:
        """``https://github.com/OWNER/NAME/.github/workflows/X.yml@REF``."""
        return f"https://github.com/{self.signer_repository or self.repository}/{self.workflow}@{self.workflow_ref}"

    def extensions(self) -> dict[int, str]:
        """The Fulcio extension values by last OID arc (the ones the policy reads)."""
        return {
            8: self.issuer,
            9: self.build_signer_uri,
            12: f"https://github.com/{self.repository}",
            13: self.commit,
            14: self.source_ref,
            20: self.trigger,
            21: f"https://github.com/{self.repository}/actions/runs/{self.run_id}/attempts/1",
        }


#: ggml-org/llama.cpp builds about b10485..b11300: release.yml on a push to master.
RELEASE_ERA: Final = FulcioIdentity(
    UPSTREAM,
    ".github/workflows/release.yml",
    "refs/heads/master",
    "refs/heads/master",
    "1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e",
    "push",
    17_000_000_001,
)
#: ggml-org/llama.cpp builds since about b11300: release-publish.yml, run by workflow_run after "Release".
PUBLISH_ERA: Final = FulcioIdentity(
    UPSTREAM,
    ".github/workflows/release-publish.yml",
    "refs/heads/master",
    "refs/heads/master",
    "c06f841" + "0" * 33,
    "workflow_run",
    18_000_000_002,
)


def der_utf8(text: str) -> bytes:
    """``text`` as a DER UTF8String (tag 0x0C, short or long length form)."""
    data = text.encode("utf-8")
    if len(data) < 0x80:
        return bytes([0x0C, len(data)]) + data
    size = (len(data).bit_length() + 7) // 8
    return bytes([0x0C, 0x80 | size]) + len(data).to_bytes(size, "big") + data


@cache
def _ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    """One throwaway CA per test run (P-256, as Fulcio's intermediate)."""
    return ec.generate_private_key(ec.SECP256R1()), x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llama-runtime tests (not sigstore.dev)")]
    )


def mint(identity: FulcioIdentity) -> x509.Certificate:
    """A short-lived leaf certificate for ``identity``, as Fulcio shapes one (throwaway CA, not trusted)."""
    ca_key, ca_name = _ca()
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(minutes=10))  # Fulcio's certificates live 10 minutes
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(identity.build_signer_uri)]  # Fulcio's SAN is the signer URI
            ),
            critical=True,
        )
    )
    for arc, value in identity.extensions().items():
        oid = x509.ObjectIdentifier(f"{_ARC}{arc}")
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, der_utf8(value)), critical=False)
    return builder.sign(ca_key, hashes.SHA256())
