"""Who signed a build attestation, and whether that signer and statement are the ones we accept.

All pure: the Fulcio certificate's identity as a :class:`Signer`, the
:class:`SignerPolicy` a signer must satisfy (issuer, source repository,
source ref, and the opt-in narrowing or widening of the signing workflow), and
whether a signed in-toto statement is SLSA provenance of this very file.
:mod:`updater.verify.signer` feeds these from sigstore-python;
:mod:`updater.verify.provenance` decides the per-runtime result.

The default policy trusts what does not move: the issuer, the repository and
the branch or tag the build ran from, whichever workflow of that repository
signed. ggml-org/llama.cpp moved its signing workflow once already
(``.github/workflows/release.yml``, trigger ``push``, from about b10485;
``.github/workflows/release-publish.yml``, trigger ``workflow_run``, from about
b11300, attestation 52864580 of b11424; both at ``refs/heads/master``; read in
``ggml-org/llama.cpp:.github/workflows/release-publish.yml`` at 5641289ad and
shared/reference/upstream-2026-10.md). A pin on the path would refuse every
build after the next move; ``gh attestation verify --repo`` checks repository
and issuer only, and the ref rule here is deliberately stricter than it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from llama_runtime.runtime.errors import LlamaRuntimeError, ProvenanceError, UserInputError
from llama_runtime.runtime.fsutil import parse_record
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.release.release import is_ref_name

if TYPE_CHECKING:
    from cryptography.x509 import Certificate
    from sigstore.models import TrustedRoot

log = get_logger("llama_runtime.install")

__all__ = [
    "GITHUB_ACTIONS_ISSUER",
    "KNOWN_DEFAULT_BRANCHES",
    "RENAMED_REPOSITORIES",
    "SLSA_PROVENANCE_V1",
    "UNKNOWN_DEFAULT_BRANCHES",
    "UPSTREAM_RELEASE_WORKFLOW",
    "Signer",
    "SignerPolicy",
    "SigstoreMissingError",
    "TrustRoot",
    "attested_sha256s",
    "load_trust_root",
    "policy_violation",
    "signer_from_extensions",
    "statement_violation",
    "trusted_default_branch",
    "verify_bundle",
]


# -- signer ------------------------------------------------------------------------------------------------------

#: The OIDC issuer of GitHub Actions' workflow identity tokens.
GITHUB_ACTIONS_ISSUER: Final = "https://token.actions.githubusercontent.com"
#: The workflow that built, uploaded and attested ggml-org/llama.cpp's release
#: assets from llama.cpp PR #25933 (Aug 2026, about b10485) to about b11300; since
#: then ``.github/workflows/release-publish.yml`` attests. Kept as a name for
#: messages and tests: the default policy accepts any workflow of the repository.
UPSTREAM_RELEASE_WORKFLOW: Final = ".github/workflows/release.yml"
#: The repositories whose signer policy no bare ``LLAMA_RUNTIME_PROVENANCE_WORKFLOW``
#: may change (the old name redirects to the new one on GitHub); casefolded.
#: Old names GitHub still redirects, and the repository a certificate names instead: the
#: organisation was renamed (ggerganov -> ggml-org), so builds installed through the old name are
#: signed in the new one.
RENAMED_REPOSITORIES: Final = {"ggerganov/llama.cpp": "ggml-org/llama.cpp"}
#: The branches accepted when a repository's default branch cannot be learnt
#: (offline, ``install-file``, a mirror that does not store it, an API error):
#: GitHub's default for new repositories since October 2020 and the one before.
UNKNOWN_DEFAULT_BRANCHES: Final = ("master", "main")
#: Default branches that are facts rather than answers (by canonical repository): upstream's
#: signing workflows run on ``master`` (scripts/upstream-facts.json; the canary reports a rename).
#: What any source says about these repositories is not asked.
KNOWN_DEFAULT_BRANCHES: Final = {"ggml-org/llama.cpp": "master"}
#: What actions/attest-build-provenance signs: SLSA provenance in an in-toto statement.
SLSA_PROVENANCE_V1: Final = "https://slsa.dev/provenance/v1"
_IN_TOTO_STATEMENTS: Final = frozenset({"https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1"})
_GITHUB: Final = "https://github.com/"
_TAGS: Final = "refs/tags/"
_HEADS: Final = "refs/heads/"

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
        repository: ``owner/name`` the workflow ran in (Source Repository URI).
        workflow: The signing workflow's path, e.g. ``.github/workflows/release.yml``.
        ref: The ref of the signing workflow, from the Build Signer URI.
        commit: The certificate's Source Repository Digest: the commit the signing
            run checked out. Under ``workflow_run`` that is the publisher's commit
            (where master was when publishing ran), not the built commit.
        run_url: The workflow run (``…/actions/runs/ID/attempts/N``).
        trigger: The event that started the run (``push``, ``workflow_run``).
        build_signer_uri: The certificate's identity, verbatim.
        source_ref: The Source Repository Ref the run was for (``refs/heads/master``).
    """

    issuer: str
    repository: str
    workflow: str
    ref: str
    commit: str
    run_url: str
    trigger: str = ""
    build_signer_uri: str = ""
    source_ref: str = ""

    @property
    def signer_repository(self) -> str:
        """``owner/name`` the signing workflow lives in (another one for a reusable workflow)."""
        owner_repo = _github_path(self.build_signer_uri).split("/", 2)
        return "/".join(owner_repo[:2]) if len(owner_repo) == 3 else ""

    def to_json(self) -> dict[str, str]:
        """The signer's fields as JSON (``commit`` is the older name of ``signer_commit``)."""
        return {
            "issuer": self.issuer,
            "repository": self.repository,
            "workflow": self.workflow,
            "ref": self.ref,
            "source_ref": self.source_ref,
            "signer_commit": self.commit,
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
        source_ref=values.get(EXT_SOURCE_REPOSITORY_REF, ""),
    )


@dataclass(frozen=True)
class SignerPolicy:
    """Whose signature counts: this issuer, this repository, its default branch or a tag.

    Attributes:
        repository: ``owner/name`` the asset is installed from (a fork: the fork).
        default_branch: The repository's default branch (``GET /repos/{owner}/{repo}``);
            ``None`` when it could not be learnt: then ``master`` and ``main`` count.
        workflow: An opt-in pin: only this signing workflow of ``repository`` counts.
        signer: An opt-in reusable workflow of another repository that may sign,
            ``owner/name/.github/workflows/x.yml`` (at any ref of it).
        issuer: The OIDC issuer of the signing certificate.
    """

    repository: str
    default_branch: str | None = None
    workflow: str | None = None
    signer: str | None = None
    issuer: str = GITHUB_ACTIONS_ISSUER

    @property
    def accepted_branches(self) -> tuple[str, ...]:
        """The branches a build may come from (besides any tag)."""
        return (self.default_branch,) if self.default_branch else UNKNOWN_DEFAULT_BRANCHES

    def accepts_ref(self, ref: str) -> bool:
        """Whether a build from the source ref ``ref`` counts: the default branch or any tag.

        A tag's name must be one git allows (``refs/tags/../heads/x`` is no tag).
        """
        if ref.startswith(_TAGS):
            return is_ref_name(ref[len(_TAGS) :])
        return ref in {f"{_HEADS}{branch}" for branch in self.accepted_branches}

    def describe_refs(self) -> str:
        """``refs/heads/master or a tag (refs/tags/…)`` for messages."""
        branches = " or ".join(self.accepted_branches)
        return f"{_HEADS}{branches} or a tag ({_TAGS}…)"

    def note(self) -> str:
        """What the result must say about how the ref was judged ("" when the default branch is known)."""
        if self.default_branch:
            return ""
        return f"default branch unknown: accepted {_HEADS}{' or '.join(UNKNOWN_DEFAULT_BRANCHES)}"

    def describe(self) -> str:
        """One phrase for messages: ``ggml-org/llama.cpp's .github/workflows/release.yml``."""
        return f"{self.repository}'s {self.workflow or 'workflows'}"


def _canonical(repository: str) -> str:
    folded = repository.casefold()
    return RENAMED_REPOSITORIES.get(folded, folded)


def trusted_default_branch(repository: str, reported: str | None) -> str | None:
    """The default branch the signer policy keys on: a known fact for upstream, else what GitHub reported.

    ``reported`` is GitHub's own answer (``None`` for a mirror's, see ``BuildSource.repository``).
    """
    return KNOWN_DEFAULT_BRANCHES.get(_canonical(repository), reported)


def policy_violation(signer: Signer, policy: SignerPolicy) -> str | None:
    """Why ``signer`` does not satisfy ``policy``, or ``None`` when it does.

    GitHub names are case-insensitive, so repositories compare folded. The
    source repository (Fulcio ext .12) must be the one installed from, and its
    source ref (ext .14) the default branch or a tag: a build from a feature
    branch or a pull request's merge ref is not a release, even when a workflow
    of the repository signed it. The signing workflow (the Build Signer URI,
    what ``gh attestation verify --signer-workflow`` checks) may be any of the
    repository's own, unless the policy pins one; a workflow of another
    repository (a reusable workflow) only when the policy names it.
    """
    if signer.issuer != policy.issuer:
        return f"signed by an identity from {signer.issuer or 'no issuer'}, not from {policy.issuer}"
    if _canonical(signer.repository) != _canonical(policy.repository):
        return f"built in {signer.repository or 'an unknown repository'}, not in {policy.repository}"
    if not policy.accepts_ref(signer.source_ref):
        note = f" ({policy.note()})" if policy.note() else ""
        return (
            f"built from the ref {signer.source_ref or '(none named)'}, not from "
            f"{policy.describe_refs()} of {policy.repository}{note}"
        )
    return _workflow_violation(signer, policy)


def _workflow_violation(signer: Signer, policy: SignerPolicy) -> str | None:
    signing = f"{signer.signer_repository}/{signer.workflow}"
    if _canonical(signer.signer_repository) != _canonical(policy.repository):
        if policy.signer is not None and signing.casefold() == policy.signer.casefold():
            return None
        shown = signer.build_signer_uri or "an unknown workflow"
        return (
            f"signed by the workflow {shown} of another repository; a reusable workflow signs only when "
            f"LLAMA_RUNTIME_PROVENANCE_SIGNER={policy.repository}=OWNER/NAME/.github/workflows/FILE.yml names it"
        )
    if policy.workflow is not None and signer.workflow.casefold() != policy.workflow.casefold():
        return f"signed by the workflow {signer.workflow or 'an unknown workflow'}, not by {policy.describe()}"
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


# -- attestation: The cryptographic half of provenance: one Sigstore bundle verified. ----------------------------

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
        refreshed, reason = _refreshed_root(ClientTrustConfig)
        if refreshed is not None:
            return TrustRoot(refreshed, "Sigstore's production trust root, refreshed now through TUF")
        log.warning("trust root not refreshed", reason=reason, using="the cached or shipped root")
    else:
        reason = "offline: not refreshed"
    root = ClientTrustConfig.production(offline=True).trusted_root
    return TrustRoot(root, f"Sigstore's production trust root as last refreshed or shipped with {shipped} ({reason})")


#: The most one TUF refresh of Sigstore's trust root may take, in seconds, however the network
#: behaves. python-tuf's fetcher bounds each socket wait (30 s) but not the whole: a proxy that
#: accepts and never answers, or drips a byte at a time, held ``update`` (and its lock) in
#: "checking build provenance" for over 330 s. A refresh is a few kB of metadata
#: from a CDN; a failed one falls back to the cached or shipped root, which verifies as well
#: until Sigstore rotates its keys.
TRUST_ROOT_REFRESH_DEADLINE_S: Final[float] = 10.0

# One refresh per process: a second asset of the same install (a CUDA build's cudart) must
# not pay the deadline again, nor refresh what was just refreshed. Guarded by _REFRESH_LOCK.
_REFRESH_LOCK: Final = threading.Lock()
_refresh_memo: tuple[Any, str] | None = None


def _refreshed_root(config: Any) -> tuple[Any, str]:
    """The production root refreshed through TUF within the deadline, or ``None`` and why not.

    The refresh runs on a daemon thread that is abandoned at the deadline: python-tuf
    offers no way to cancel a fetch, and the process must not wait for it (it writes its
    cache through temp files and renames, so a late finish leaves the cache whole).
    """
    global _refresh_memo
    with _REFRESH_LOCK:
        if _refresh_memo is not None:
            return _refresh_memo
        outcome: list[tuple[Any, str]] = []

        def refresh() -> None:
            try:
                outcome.append((config.production(offline=False).trusted_root, ""))
            except Exception as exc:  # sigstore raises TUFError, urllib3/OS errors …: all mean "no refresh"
                outcome.append((None, f"the refresh failed: {type(exc).__name__}"))

        worker = threading.Thread(target=refresh, name="sigstore-tuf-refresh", daemon=True)
        worker.start()
        worker.join(TRUST_ROOT_REFRESH_DEADLINE_S)
        if outcome:
            _refresh_memo = outcome[0]
        else:
            _refresh_memo = (None, f"the refresh did not finish within {TRUST_ROOT_REFRESH_DEADLINE_S:g} s")
        return _refresh_memo


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
    except (InvalidBundle, SigstoreError, ValueError, TypeError, KeyError) as exc:
        # sigstore also raises its VerificationError while parsing (a malformed RFC 3161 timestamp).
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
        statement = parse_record(payload, what="the signed statement")
    except ValueError:
        statement = None
    violation = statement_violation(statement, sha256)
    if violation is not None:
        raise ProvenanceError(violation)
    return signer_of(parsed.signing_certificate)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
