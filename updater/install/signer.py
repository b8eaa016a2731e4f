"""Who signed a build attestation, and whether that signer and statement are the ones we accept.

All pure: the Fulcio certificate's identity as a :class:`Signer`, the
:class:`SignerPolicy` a signer must satisfy (issuer, source repository,
release workflow), and whether a signed in-toto statement is SLSA provenance
of this very file. :mod:`updater.install.attestation` feeds these from
sigstore-python; :mod:`updater.install.provenance` decides the per-runtime
result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "GITHUB_ACTIONS_ISSUER",
    "SLSA_PROVENANCE_V1",
    "UPSTREAM_RELEASE_WORKFLOW",
    "Signer",
    "SignerPolicy",
    "attested_sha256s",
    "policy_violation",
    "signer_from_extensions",
    "statement_violation",
]

#: The OIDC issuer of GitHub Actions' workflow identity tokens.
GITHUB_ACTIONS_ISSUER: Final = "https://token.actions.githubusercontent.com"
#: The workflow that builds, uploads and (since llama.cpp PR #25933, Aug 2026:
#: "the release attest step") attests ggml-org/llama.cpp's release assets. It
#: runs on pushes to master and on manual dispatch, so the signer's ref is
#: ``refs/heads/master``, never a tag: the policy pins the path, not the ref.
UPSTREAM_RELEASE_WORKFLOW: Final = ".github/workflows/release.yml"
#: What actions/attest-build-provenance signs: SLSA provenance in an in-toto statement.
SLSA_PROVENANCE_V1: Final = "https://slsa.dev/provenance/v1"
_IN_TOTO_STATEMENTS: Final = frozenset({"https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1"})
_GITHUB: Final = "https://github.com/"

# Fulcio's certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md),
# by the last arc of 1.3.6.1.4.1.57264.1.N; the values are DER UTF8Strings.
OID_PREFIX: Final = "1.3.6.1.4.1.57264.1."
EXT_ISSUER: Final = 8
EXT_BUILD_SIGNER_URI: Final = 9
EXT_SOURCE_REPOSITORY_URI: Final = 12
EXT_SOURCE_REPOSITORY_DIGEST: Final = 13
EXT_SOURCE_REPOSITORY_REF: Final = 14
EXT_BUILD_TRIGGER: Final = 20
EXT_RUN_INVOCATION_URI: Final = 21

# -- the signer and the policy (pure) ---------------------------------------------------


@dataclass(frozen=True)
class Signer:
    """Who signed an attestation, as the Fulcio certificate says.

    Attributes:
        issuer: The OIDC issuer (GitHub Actions for a workflow run).
        repository: ``owner/name`` the workflow ran in.
        workflow: The signing workflow's path, e.g. ``.github/workflows/release.yml``.
        ref: The git ref the workflow ran at (``refs/heads/master``).
        commit: The source commit the run built.
        run_url: The workflow run (``…/actions/runs/ID/attempts/N``).
        trigger: The event that started the run (``push``, ``workflow_dispatch``).
        build_signer_uri: The certificate's identity, verbatim.
    """

    issuer: str
    repository: str
    workflow: str
    ref: str
    commit: str
    run_url: str
    trigger: str = ""
    build_signer_uri: str = ""

    def to_json(self) -> dict[str, str]:
        """The signer's fields as JSON."""
        return {
            "issuer": self.issuer,
            "repository": self.repository,
            "workflow": self.workflow,
            "ref": self.ref,
            "commit": self.commit,
            "run_url": self.run_url,
            "trigger": self.trigger,
            "build_signer_uri": self.build_signer_uri,
        }


def _github_path(uri: str) -> str:
    return uri[len(_GITHUB) :] if uri.startswith(_GITHUB) else ""


def signer_from_extensions(values: Mapping[int, str]) -> Signer:
    """The signer a certificate names, from its Fulcio extensions (keyed by last OID arc).

    Missing extensions become empty strings; the policy then refuses them.
    """
    signer_uri = values.get(EXT_BUILD_SIGNER_URI, "")
    repo_uri = values.get(EXT_SOURCE_REPOSITORY_URI, "")
    repository = _github_path(repo_uri).strip("/")
    workflow_at = _github_path(signer_uri)
    owner_repo = workflow_at.split("/", 2)
    # "owner/name/.github/workflows/x.yml@refs/…" -> ".github/workflows/x.yml", "refs/…"
    workflow, _, ref = (owner_repo[2] if len(owner_repo) == 3 else "").partition("@")
    return Signer(
        issuer=values.get(EXT_ISSUER, ""),
        repository=repository,
        workflow=workflow,
        ref=ref or values.get(EXT_SOURCE_REPOSITORY_REF, ""),
        commit=values.get(EXT_SOURCE_REPOSITORY_DIGEST, ""),
        run_url=values.get(EXT_RUN_INVOCATION_URI, ""),
        trigger=values.get(EXT_BUILD_TRIGGER, ""),
        build_signer_uri=signer_uri,
    )


@dataclass(frozen=True)
class SignerPolicy:
    """Whose signature counts: this issuer, this repository, this workflow.

    Attributes:
        repository: ``owner/name`` the asset is installed from (a fork: the fork).
        workflow: The release workflow's path in that repository.
        issuer: The OIDC issuer of the signing certificate.
    """

    repository: str
    workflow: str = UPSTREAM_RELEASE_WORKFLOW
    issuer: str = GITHUB_ACTIONS_ISSUER

    def describe(self) -> str:
        """One phrase for messages: ``ggml-org/llama.cpp's .github/workflows/release.yml``."""
        return f"{self.repository}'s {self.workflow}"


def policy_violation(signer: Signer, policy: SignerPolicy) -> str | None:
    """Why ``signer`` does not satisfy ``policy``, or ``None`` when it does.

    GitHub names are case-insensitive, so the repository compares folded; the
    workflow must be the signing workflow itself (the certificate's Build
    Signer URI, what ``gh attestation verify --signer-workflow`` checks) in
    the same repository, at any ref.
    """
    if signer.issuer != policy.issuer:
        return f"signed by an identity from {signer.issuer or 'no issuer'}, not from {policy.issuer}"
    if signer.repository.casefold() != policy.repository.casefold():
        return f"built in {signer.repository or 'an unknown repository'}, not in {policy.repository}"
    expected = f"{_GITHUB}{policy.repository}/{policy.workflow}@".casefold()
    if not signer.build_signer_uri.casefold().startswith(expected):
        shown = signer.workflow or signer.build_signer_uri or "an unknown workflow"
        return f"signed by the workflow {shown}, not by {policy.describe()}"
    return None


# -- the statement (pure) ---------------------------------------------------------------


def attested_sha256s(statement: Mapping[str, Any]) -> list[str]:
    """The sha256 digests of the statement's subjects (lowercase hex)."""
    subjects = statement.get("subject")
    found: list[str] = []
    for subject in subjects if isinstance(subjects, list) else []:
        digest = subject.get("digest") if isinstance(subject, dict) else None
        value = digest.get("sha256") if isinstance(digest, dict) else None
        if isinstance(value, str):
            found.append(value.lower())
    return found


def statement_violation(statement: object, sha256: str) -> str | None:
    """Why the signed statement does not attest SLSA provenance of the file ``sha256``, or ``None``."""
    if not isinstance(statement, dict) or statement.get("_type") not in _IN_TOTO_STATEMENTS:
        return "the signed payload is not an in-toto statement"
    predicate = statement.get("predicateType")
    if predicate != SLSA_PROVENANCE_V1:
        return f"it attests {predicate!r}, not SLSA build provenance ({SLSA_PROVENANCE_V1})"
    digests = attested_sha256s(statement)
    if sha256.lower() not in digests:
        named = ", ".join(d[:12] + "…" for d in digests) or "no sha256 subject"
        return f"it attests {named}, not this file (sha256 {sha256[:12]}…)"
    return None
