"""A private Sigstore for tests: a trust root of its own, and complete bundles minted under it.

No real Sigstore bundle with a ggml-org/llama.cpp identity can be had offline,
so this module plays Fulcio, a CT log and Rekor with test keys held in memory:

* :meth:`PrivateSigstore.trusted_root` is a Sigstore TrustedRoot v0.1 document
  (the shape of tests/data/sigstore/staging_trusted_root.json) naming a Fulcio
  CA (root and intermediate), a CT log key and a Rekor key, with valid-for windows;
* :meth:`PrivateSigstore.mint` signs an in-toto statement for a GitHub Actions
  identity and returns a complete Sigstore bundle v0.3 (a DSSE envelope): a
  leaf certificate carrying Fulcio's extensions, an embedded RFC 6962 SCT,
  and a Rekor v1 ``dsse`` 0.0.1 log entry with integrated time, inclusion
  promise (SET) and an RFC 6962 inclusion proof with a signed checkpoint.

What it proves, and what it does not: a minted bundle goes through the very
verification sigstore-python 4.5.1 does for a production bundle
(``Verifier.verify_dsse``: chain, SCT, policy, SET, Merkle proof, checkpoint,
envelope signature, entry consistency) and then the project's own statement
check, so the signer policy and the whole pipeline are proven end to end under
a private trust root (``LLAMA_RUNTIME_TRUSTED_ROOT``). It proves nothing about
Sigstore's production or staging keys: the real staging bundle in
tests/data/sigstore does that.

Everything is derived from fixed seeds and times (RFC 6979 deterministic
ECDSA), so one name gives byte-identical roots and bundles in every run.
Where each structure's layout comes from (sigstore-python 4.5.1, read here):
``sigstore/verify/verifier.py`` (the order of checks, the Rekor ``dsse``
body consistency check), ``sigstore/models.py`` (bundle invariants, the SET's
RFC 8785 payload), ``sigstore/_internal/sct.py`` (the precertificate SCT over
``tbs_precertificate_bytes``), ``_internal/rekor/checkpoint.py`` (the signed
note, key hint = first 4 bytes of the RFC 6962 key ID), ``_internal/merkle.py``
(RFC 6962 leaf/node hashing, proof order bottom-up).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, Final

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_SIGNED_AT",
    "GitHubIdentity",
    "PrivateSigstore",
    "private_sigstore",
    "release_publish_identity",
    "release_yml_identity",
    "slsa_statement",
]

GITHUB_ACTIONS_ISSUER: Final = "https://token.actions.githubusercontent.com"
IN_TOTO_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
BUNDLE_V03: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
TRUSTED_ROOT_V01: Final = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
#: actions/buildtypes ``workflow/v1/README.md``: the buildType actions/attest-build-provenance writes.
GITHUB_WORKFLOW_BUILD_TYPE: Final = "https://actions.github.io/buildtypes/workflow/v1"

#: When the minted signatures happen: 2026-10-05, the day upstream's b11424 was attested
#: (shared/reference/upstream-2026-10.md). Fixed, so bundles are byte-identical every run;
#: the verifier checks the certificate against the log's integrated time, never the clock.
DEFAULT_SIGNED_AT: Final = datetime(2026, 10, 5, 12, 0, 0, tzinfo=UTC)
#: Start of every trust-root window and CA certificate. sigstore compares ``validFor.start``
#: with the real clock (``_utils.is_timerange_valid``), so it lies well before any test run.
_TRUST_SINCE: Final = datetime(2025, 1, 1, tzinfo=UTC)
_CA_UNTIL: Final = datetime(2036, 1, 1, tzinfo=UTC)
#: Fulcio issues certificates valid for 10 minutes; the log integrates the entry seconds later.
_LEAF_LIFETIME: Final = timedelta(minutes=10)
_INTEGRATION_DELAY: Final = timedelta(seconds=2)

# Fulcio's OIDs (sigstore/fulcio docs/oid-info.md): 1.1-1.6 are the deprecated raw-UTF-8
# GitHub extensions Fulcio still writes; 1.8 on are DER UTF8Strings.
_FULCIO: Final = "1.3.6.1.4.1.57264.1."
_SCT_LIST_OID: Final = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")  # RFC 6962 section 3.3

# The Rekor shard the minted entry sits in: 7 leaves, ours at index 5, so the inclusion proof
# has both inner and right-border hashes. Rekor v1's global index adds the earlier shards.
_TREE_SIZE: Final = 7
_TREE_INDEX: Final = 5
_EARLIER_SHARDS_SIZE: Final = 140_000_000


# -- who signs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GitHubIdentity:
    """The GitHub Actions run a minted certificate is issued to (what Fulcio reads from the OIDC token).

    Attributes:
        repository: ``owner/name`` the workflow ran in (Source Repository URI, 1.12).
        workflow: The signing workflow's path (Build Signer URI, 1.9, and the SAN).
        ref: The git ref the run was at (1.14, and the Build Signer URI's ``@ref``).
        trigger: The event that started the run (1.20).
        commit: The source commit of the run (1.13).
        run_id: The workflow run; the Run Invocation URI (1.21) is built from it.
        workflow_name: The workflow's ``name:`` (deprecated 1.4).
        signer_uri: The Build Signer URI when it is not ``repository``'s own ``workflow`` (a
            reusable workflow); ``None``: ``https://github.com/{repository}/{workflow}@{ref}``.
    """

    repository: str
    workflow: str
    ref: str
    trigger: str
    commit: str
    run_id: int
    workflow_name: str = ""
    signer_uri: str | None = None

    @property
    def build_signer_uri(self) -> str:
        """The certificate's identity (SAN URI and 1.9)."""
        return self.signer_uri or f"https://github.com/{self.repository}/{self.workflow}@{self.ref}"

    @property
    def build_config_uri(self) -> str:
        """The top-level workflow (1.18): the run's own workflow, whoever signed."""
        return f"https://github.com/{self.repository}/{self.workflow}@{self.ref}"

    @property
    def run_url(self) -> str:
        """The Run Invocation URI (1.21)."""
        return f"https://github.com/{self.repository}/actions/runs/{self.run_id}/attempts/1"


#: Test commits and runs: made-up values of the real shape (40 hex digits, a run number of
#: today's magnitude), never upstream's, so a minted bundle cannot pass for a real one.
_RELEASE_ERA_COMMIT: Final = "1e1e" * 10
_PUBLISH_ERA_COMMIT: Final = "c0c0" * 10
#: The repository and owner ids a certificate and statement name (tests/fakegithub.py serves
#: ``repository_id`` 612354784 with every attestation); test values, not upstream's.
_REPOSITORY_ID: Final = "612354784"
_OWNER_ID: Final = "134263123"


def release_yml_identity(
    repository: str = "ggml-org/llama.cpp", *, commit: str = _RELEASE_ERA_COMMIT, run_id: int = 31000000001
) -> GitHubIdentity:
    """Upstream's first signing era (about b10485 to b11300): ``release.yml`` on a push to master.

    shared/reference/upstream-2026-10.md ("Who signs"): Build Signer URI
    ``https://github.com/ggml-org/llama.cpp/.github/workflows/release.yml@refs/heads/master``, trigger ``push``.
    """
    return GitHubIdentity(
        repository=repository,
        workflow=".github/workflows/release.yml",
        ref="refs/heads/master",
        trigger="push",
        commit=commit,
        run_id=run_id,
        workflow_name="Release",
    )


def release_publish_identity(
    repository: str = "ggml-org/llama.cpp", *, commit: str = _PUBLISH_ERA_COMMIT, run_id: int = 32000000002
) -> GitHubIdentity:
    """Upstream's second era (about b11300 on): ``release-publish.yml``, run by ``workflow_run`` of "Release".

    shared/reference/upstream-2026-10.md: ``…/.github/workflows/release-publish.yml@refs/heads/master``,
    trigger ``workflow_run``; the commit is the one master was at when publishing ran.
    """
    return GitHubIdentity(
        repository=repository,
        workflow=".github/workflows/release-publish.yml",
        ref="refs/heads/master",
        trigger="workflow_run",
        commit=commit,
        run_id=run_id,
        workflow_name="Publish Release",
    )


def slsa_statement(subjects: Mapping[str, str], identity: GitHubIdentity) -> dict[str, Any]:
    """An in-toto v1 statement with SLSA provenance v1 for ``subjects`` (name -> sha256 hex).

    Shaped as actions/attest-build-provenance writes it (buildType
    ``https://actions.github.io/buildtypes/workflow/v1``, actions/buildtypes workflow/v1/README.md).
    """
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in subjects.items()],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": GITHUB_WORKFLOW_BUILD_TYPE,
                "externalParameters": {
                    "workflow": {
                        "ref": identity.ref,
                        "repository": f"https://github.com/{identity.repository}",
                        "path": identity.workflow,
                    }
                },
                "internalParameters": {
                    "github": {
                        "event_name": identity.trigger,
                        "repository_id": _REPOSITORY_ID,
                        "repository_owner_id": _OWNER_ID,
                        "runner_environment": "github-hosted",
                    }
                },
                "resolvedDependencies": [
                    {
                        "uri": f"git+https://github.com/{identity.repository}@{identity.ref}",
                        "digest": {"gitCommit": identity.commit},
                    }
                ],
            },
            "runDetails": {
                "builder": {"id": identity.build_signer_uri},
                "metadata": {"invocationId": identity.run_url},
            },
        },
    }


# -- DER and TLS encodings ---------------------------------------------------------------------


def _der_length(size: int) -> bytes:
    if size < 0x80:
        return bytes([size])
    raw = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _der_utf8(text: str) -> bytes:
    """A DER UTF8String, the value Fulcio writes for extensions 1.8 on."""
    raw = text.encode()
    return b"\x0c" + _der_length(len(raw)) + raw


def _der_octets(raw: bytes) -> bytes:
    return b"\x04" + _der_length(len(raw)) + raw


def _tls_vector(raw: bytes, width: int) -> bytes:
    """A TLS ``opaque<0..2^(8*width)-1>``: a big-endian length of ``width`` bytes, then the bytes."""
    return len(raw).to_bytes(width, "big") + raw


# -- keys ------------------------------------------------------------------------------------


_P256_ORDER: Final = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_SIGN: Final = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)  # RFC 6979: same bytes every run


def _key(label: str) -> ec.EllipticCurvePrivateKey:
    """A P-256 test key derived from ``label``: the same key every run, never a secret."""
    scalar = int.from_bytes(hashlib.sha256(f"llama-runtime sigstore_mint {label}".encode()).digest(), "big")
    return ec.derive_private_key(scalar % (_P256_ORDER - 1) + 1, ec.SECP256R1())


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    """RFC 6962 section 3.2's key ID (what sigstore's keyrings and SCTs name a key by)."""
    return hashlib.sha256(_spki(key)).digest()


def _serial(label: str) -> int:
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:19], "big") | 1  # positive, under 20 bytes


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# -- the Fulcio CA ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FulcioCA:
    """A Fulcio-shaped CA: a self-signed root and a code-signing intermediate under it."""

    name: str
    root: x509.Certificate
    intermediate: x509.Certificate
    intermediate_key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str) -> _FulcioCA:
        root_key, intermediate_key = _key(f"{name} fulcio root"), _key(f"{name} fulcio intermediate")
        root_name = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, name), x509.NameAttribute(NameOID.COMMON_NAME, "sigstore")]
        )
        intermediate_name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, name),
                x509.NameAttribute(NameOID.COMMON_NAME, "sigstore-intermediate"),
            ]
        )
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)  # keyCertSign, cRLSign
        root_ski = x509.SubjectKeyIdentifier.from_public_key(root_key.public_key())
        root = (
            x509.CertificateBuilder()
            .subject_name(root_name)
            .issuer_name(root_name)
            .public_key(root_key.public_key())
            .serial_number(_serial(f"{name} root"))
            .not_valid_before(_TRUST_SINCE)
            .not_valid_after(_CA_UNTIL)
            .add_extension(usage, critical=True)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(root_ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(root_ski), critical=False)
            .sign(root_key, hashes.SHA256(), ecdsa_deterministic=True)
        )
        intermediate = (
            x509.CertificateBuilder()
            .subject_name(intermediate_name)
            .issuer_name(root_name)
            .public_key(intermediate_key.public_key())
            .serial_number(_serial(f"{name} intermediate"))
            .not_valid_before(_TRUST_SINCE)
            .not_valid_after(_CA_UNTIL)
            .add_extension(usage, critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(intermediate_key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(root_ski), critical=False)
            .sign(root_key, hashes.SHA256(), ecdsa_deterministic=True)
        )
        return cls(name, root, intermediate, intermediate_key)


def _fulcio_extensions(identity: GitHubIdentity) -> list[x509.UnrecognizedExtension]:
    """The Fulcio extensions of a GitHub Actions certificate, in Fulcio's order."""
    owner = identity.repository.split("/")[0]
    raw = {  # deprecated, raw UTF-8
        1: GITHUB_ACTIONS_ISSUER,
        2: identity.trigger,
        3: identity.commit,
        4: identity.workflow_name,
        5: identity.repository,
        6: identity.ref,
    }
    der = {
        8: GITHUB_ACTIONS_ISSUER,
        9: identity.build_signer_uri,
        10: identity.commit,  # Build Signer Digest
        11: "github-hosted",  # Runner Environment
        12: f"https://github.com/{identity.repository}",
        13: identity.commit,
        14: identity.ref,
        15: _REPOSITORY_ID,
        16: f"https://github.com/{owner}",
        17: _OWNER_ID,
        18: identity.build_config_uri,
        19: identity.commit,  # Build Config Digest
        20: identity.trigger,
        21: identity.run_url,
        22: "public",
    }
    found = [x509.UnrecognizedExtension(x509.ObjectIdentifier(f"{_FULCIO}{arc}"), v.encode()) for arc, v in raw.items()]
    found += [
        x509.UnrecognizedExtension(x509.ObjectIdentifier(f"{_FULCIO}{arc}"), _der_utf8(v)) for arc, v in der.items()
    ]
    return found


# -- the transparency logs ------------------------------------------------------------------------


def _leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()  # RFC 6962 section 2.1


def _node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """RFC 6962's k: the largest power of two smaller than ``size`` (size > 1)."""
    return 1 << ((size - 1).bit_length() - 1)


def _tree_hash(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 section 2.1's MTH over leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return _node_hash(_tree_hash(leaves[:k]), _tree_hash(leaves[k:]))


def _inclusion_path(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.1's PATH(m, D[n]), lowest level first (the order merkle.py chains)."""
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*_inclusion_path(index, leaves[:k]), _tree_hash(leaves[k:])]
    return [*_inclusion_path(index - k, leaves[k:]), _tree_hash(leaves[:k])]


def _sct_extension(
    ct_key: ec.EllipticCurvePrivateKey, issuer_key: ec.EllipticCurvePublicKey, tbs: bytes, at: datetime
) -> x509.UnrecognizedExtension:
    """An embedded SCT list (RFC 6962 section 3.3) over the precertificate ``tbs`` (no SCT extension in it)."""
    millis = int(at.timestamp() * 1000)
    issuer_key_hash = _key_id(issuer_key)  # binds the SCT to the issuing CA (RFC 6962 section 3.2)
    signed = (
        struct.pack("!BBQH", 0, 0, millis, 1)  # v1, certificate_timestamp, timestamp, precert_entry
        + issuer_key_hash
        + _tls_vector(tbs, 3)
        + _tls_vector(b"", 2)  # no CT extensions
    )
    signature = ct_key.sign(signed, _SIGN)
    sct = (
        b"\x00"
        + _key_id(ct_key.public_key())
        + struct.pack("!Q", millis)
        + _tls_vector(b"", 2)
        + bytes([4, 3])  # sha256, ecdsa
        + _tls_vector(signature, 2)
    )
    return x509.UnrecognizedExtension(_SCT_LIST_OID, _der_octets(_tls_vector(_tls_vector(sct, 2), 2)))


def _iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the private Sigstore ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateSigstore:
    """Fulcio, a CT log and Rekor of a private Sigstore instance, with their keys in memory.

    Attributes:
        name: What its keys and names derive from (the same name, the same bytes).
        ca: The Fulcio CA that issues leaf certificates.
        ct_key: The CT log's key (signs SCTs).
        rekor_key: Rekor's key (signs inclusion promises and checkpoints).
    """

    name: str
    ca: _FulcioCA
    ct_key: ec.EllipticCurvePrivateKey
    rekor_key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str = "llama-runtime tests") -> PrivateSigstore:
        """A private Sigstore whose every key is derived from ``name``."""
        return cls(name, _FulcioCA.create(name), _key(f"{name} ctlog"), _key(f"{name} rekor"))

    def with_other_ca(self, name: str) -> PrivateSigstore:
        """The same CT log and Rekor with another Fulcio CA (a certificate this root never issued)."""
        return dataclasses.replace(self, ca=_FulcioCA.create(name))

    @property
    def log_host(self) -> str:
        """The Rekor origin's host name (``.test`` is reserved: it never resolves)."""
        return "rekor.llama-runtime.test"

    # -- the trust root -----------------------------------------------------------------------------

    def trusted_root(self) -> dict[str, Any]:
        """This instance's Sigstore TrustedRoot v0.1 document (what ``LLAMA_RUNTIME_TRUSTED_ROOT`` names)."""

        def log(url: str, key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
            public = key.public_key()
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": _b64(_spki(public)),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": _iso(_TRUST_SINCE)},
                },
                "logId": {"keyId": _b64(_key_id(public))},
            }

        chain = [self.ca.intermediate, self.ca.root]
        return {
            "mediaType": TRUSTED_ROOT_V01,
            "tlogs": [log(f"https://{self.log_host}", self.rekor_key)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": self.ca.name, "commonName": "sigstore"},
                    "uri": "https://fulcio.llama-runtime.test",
                    "certChain": {
                        "certificates": [{"rawBytes": _b64(c.public_bytes(serialization.Encoding.DER))} for c in chain]
                    },
                    "validFor": {"start": _iso(_TRUST_SINCE)},
                }
            ],
            "ctlogs": [log("https://ctfe.llama-runtime.test", self.ct_key)],
            "timestampAuthorities": [],
        }

    def write_trusted_root(self, path: Path) -> Path:
        """Write :meth:`trusted_root` to ``path``; returns ``path``."""
        path.write_text(json.dumps(self.trusted_root(), indent=2))
        return path

    # -- bundles ----------------------------------------------------------------------------------------

    def mint(
        self,
        statement: Mapping[str, Any],
        identity: GitHubIdentity,
        *,
        signed_at: datetime = DEFAULT_SIGNED_AT,
        embed_sct: bool = True,
    ) -> dict[str, Any]:
        """A complete Sigstore bundle v0.3 (DSSE) of ``statement``, signed as ``identity`` at ``signed_at``.

        Args:
            statement: The in-toto statement to sign (see :func:`slsa_statement`).
            identity: The GitHub Actions run the leaf certificate is issued to.
            signed_at: When Fulcio issued the certificate; the log integrates the entry 2 s later.
            embed_sct: ``False`` leaves the SCT out of the certificate (a certificate no CT log saw).

        Returns:
            The bundle as JSON (a fresh object each call: tests may tamper with it).
        """
        payload = json.dumps(statement, separators=(",", ":")).encode()
        leaf_key = _key(f"{self.name} leaf {identity.run_url} {hashlib.sha256(payload).hexdigest()}")
        cert = self._leaf(identity, leaf_key.public_key(), signed_at, embed_sct=embed_sct)
        pae = b"DSSEv1 %d %s %d %s" % (len(IN_TOTO_PAYLOAD_TYPE), IN_TOTO_PAYLOAD_TYPE.encode(), len(payload), payload)
        signature = leaf_key.sign(pae, _SIGN)
        envelope = {
            "payload": _b64(payload),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": _b64(signature)}],
        }
        entry = self._log_entry(envelope, payload, signature, cert, signed_at + _INTEGRATION_DELAY)
        return {
            "mediaType": BUNDLE_V03,
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [entry],
            },
            "dsseEnvelope": envelope,
        }

    def _leaf(
        self, identity: GitHubIdentity, public: ec.EllipticCurvePublicKey, at: datetime, *, embed_sct: bool
    ) -> x509.Certificate:
        """The Fulcio leaf: empty subject, critical URI SAN, codeSigning, Fulcio's extensions, then the SCT."""
        issuer = self.ca.intermediate
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(issuer.subject)
            .public_key(public)
            .serial_number(_serial(f"{self.ca.name} leaf {identity.run_url} {at.isoformat()}"))
            .not_valid_before(at)
            .not_valid_after(at + _LEAF_LIFETIME)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                    issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity.build_signer_uri)]), critical=True
            )
        )
        for extension in _fulcio_extensions(identity):
            builder = builder.add_extension(extension, critical=False)
        precert = builder.sign(self.ca.intermediate_key, hashes.SHA256(), ecdsa_deterministic=True)
        if not embed_sct:
            return precert
        sct = _sct_extension(self.ct_key, self.ca.intermediate_key.public_key(), precert.tbs_certificate_bytes, at)
        cert = builder.add_extension(sct, critical=False).sign(
            self.ca.intermediate_key, hashes.SHA256(), ecdsa_deterministic=True
        )
        # What verifiers recompute (sct.py: tbs_precertificate_bytes) is exactly what the CT log signed.
        assert cert.tbs_precertificate_bytes == precert.tbs_certificate_bytes
        return cert

    def _log_entry(
        self,
        envelope: Mapping[str, Any],
        payload: bytes,
        signature: bytes,
        cert: x509.Certificate,
        integrated: datetime,
    ) -> dict[str, Any]:
        """A Rekor v1 ``dsse`` 0.0.1 entry: body, SET, and an inclusion proof with a signed checkpoint."""
        body = rfc8785.dumps(
            {
                "apiVersion": "0.0.1",
                "kind": "dsse",
                "spec": {
                    # Rekor hashes the envelope it canonicalised; sigstore cannot check it (verifier.py).
                    "envelopeHash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(rfc8785.dumps(dict(envelope))).hexdigest(),
                    },
                    "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
                    "signatures": [
                        {"signature": _b64(signature), "verifier": _b64(cert.public_bytes(serialization.Encoding.PEM))}
                    ],
                },
            }
        )
        leaves = [_leaf_hash(b"llama-runtime test log entry %d" % i) for i in range(_TREE_SIZE)]
        leaves[_TREE_INDEX] = _leaf_hash(body)
        root = _tree_hash(leaves)
        log_id = _key_id(self.rekor_key.public_key())
        log_index = _EARLIER_SHARDS_SIZE + _TREE_INDEX
        seconds = int(integrated.timestamp())
        promise = rfc8785.dumps(
            {"body": _b64(body), "integratedTime": seconds, "logID": log_id.hex(), "logIndex": log_index}
        )
        return {
            "logIndex": str(log_index),
            "logId": {"keyId": _b64(log_id)},
            "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(seconds),
            "inclusionPromise": {"signedEntryTimestamp": _b64(self.rekor_key.sign(promise, _SIGN))},
            "inclusionProof": {
                "logIndex": str(_TREE_INDEX),
                "rootHash": _b64(root),
                "treeSize": str(_TREE_SIZE),
                "hashes": [_b64(h) for h in _inclusion_path(_TREE_INDEX, leaves)],
                "checkpoint": {"envelope": self._checkpoint(root, log_id)},
            },
            "canonicalizedBody": _b64(body),
        }

    def _checkpoint(self, root: bytes, log_id: bytes) -> str:
        """A signed note over the tree head; the key hint is the key ID's first 4 bytes (checkpoint.py)."""
        # Rekor v1's origin is "<host> - <tree ID>" (the staging bundle's checkpoint reads so); any ID will do.
        note = f"{self.log_host} - 2605736670972794746\n{_TREE_SIZE}\n{_b64(root)}\n"
        signature = self.rekor_key.sign(note.encode(), _SIGN)
        return f"{note}\n\u2014 {self.log_host} {_b64(log_id[:4] + signature)}\n"


@cache
def private_sigstore(name: str = "llama-runtime tests") -> PrivateSigstore:
    """The private Sigstore of a test session (built once: its CA certificates take a few ms)."""
    return PrivateSigstore.create(name)
