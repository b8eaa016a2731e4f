"""Build provenance: who built a downloaded asset, checked before anything is activated.

A sha256 digest from the GitHub API proves the bytes are the ones the release
lists, not who built them: whoever can edit a release can change both. GitHub
artifact attestations close that gap: a Sigstore-signed in-toto statement
(SLSA build provenance) naming the asset's sha256, signed with a short-lived
certificate that Fulcio issued to one GitHub Actions workflow run.

This module reads the published attestations of a file and decides the
per-runtime result (``verified`` / ``absent`` / ``unverified``). Whose
signature counts and what a statement must say is :mod:`updater.verify.signer`
(pure); the cryptography (the signature, the chain to the Sigstore trust
root, the transparency-log inclusion) is :mod:`updater.verify.signer`'s
job, done by sigstore-python and imported only when a bundle is there.

Invariants:
    * A published attestation that fails any check is an
      :class:`~runtime.errors.ProvenanceError` (exit 8): nothing is activated,
      never a quiet downgrade to ``absent``.
    * ``absent`` means the source answered that none is published;
      ``unverified`` means nobody checked (and says why). Only
      ``--require-provenance`` turns either into an exit-8 refusal.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from llama_runtime.runtime.errors import LlamaRuntimeError, ProvenanceError, ProvenanceMissingError
from llama_runtime.updater.config import ProvenanceSettings, env_flag, parse_signers, parse_workflows
from llama_runtime.updater.logs import get_logger
from llama_runtime.updater.release.release import UPSTREAM_REPOS
from llama_runtime.updater.verify.install_facts import InstallFacts
from llama_runtime.updater.verify.signer import Signer, SignerPolicy, trusted_default_branch

__all__ = [
    "Listing",
    "Provenance",
    "ProvenanceCheck",
    "combine",
    "parse_attestations",
    "parse_signers",
    "parse_workflows",
    "predicate_type",
    "read_attestation_file",
    "read_listing",
    "record_each_provenance",
    "with_build_commit",
]


# -- provenance --------------------------------------------------------------------------------------------------

Status = Literal["verified", "absent", "unverified"]
log = get_logger("llama_runtime.install")


# -- the attestations of a file ---------------------------------------------------------


def parse_attestations(payload: object) -> list[dict[str, Any]]:
    """The Sigstore bundles of an attestations answer, a bundle file or a JSON-lines file.

    Accepts GitHub's ``{"attestations": [{"bundle": …}, …]}`` (also as the
    client's :class:`~updater.sources.bundle_url.ResolvedAttestations`), one
    bundle object, or a list of either (what ``gh attestation download``
    writes, one bundle per line, once decoded). Entries without an inline
    bundle are skipped. Every kind of attestation is returned.
    """
    payload = _unwrap(payload)[0]
    if isinstance(payload, dict) and isinstance(payload.get("attestations"), list):
        payload = payload["attestations"]
    items = payload if isinstance(payload, list) else [payload]
    bundles: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("bundle"), dict):
            item = item["bundle"]
        if isinstance(item, dict) and "verificationMaterial" in item:
            bundles.append(item)
    return bundles


def _unwrap(answer: object) -> tuple[object, tuple[str, ...]]:
    """The API JSON of an answer and why entries of it could not be fetched."""
    from llama_runtime.updater.sources.bundle_url import ResolvedAttestations

    if isinstance(answer, ResolvedAttestations):
        return answer.answer, answer.failures
    return answer, ()


#: What every SLSA provenance predicate type starts with (slsa.dev/spec: v0.1, v0.2, v1).
#: Anything else listed for a digest (GitHub's release attestations of an immutable release,
#: ``https://in-toto.io/attestation/release/v0.1`` then ``v0.2``, signed by
#: ``https://dotcom.releases.github.com``: in-toto/attestation spec/predicates/release.md,
#: cli/cli #11993; an SBOM) says nothing about who built the file.
_SLSA_PROVENANCE_PREFIX: Final = "https://slsa.dev/provenance/"


def predicate_type(bundle: dict[str, Any]) -> str | None:
    """The predicate type a DSSE bundle's statement claims (unverified), or ``None`` if unreadable."""
    from llama_runtime.updater.release.remote_json import loads_bounded

    envelope = bundle.get("dsseEnvelope")
    payload = envelope.get("payload") if isinstance(envelope, dict) else None
    if not isinstance(payload, str):
        return None
    try:
        statement = loads_bounded(base64.b64decode(payload, validate=True), what="an attestation statement")
    except (ValueError, LlamaRuntimeError):
        return None
    kind = statement.get("predicateType") if isinstance(statement, dict) else None
    return kind if isinstance(kind, str) else None


@dataclass(frozen=True)
class Listing:
    """An attestations answer sorted for the decision.

    Attributes:
        provenance: Bundles to verify: SLSA provenance, and any whose kind cannot be
            read (verification then says what is wrong with them).
        other_kinds: Predicate types listed beside them and set aside.
        problems: Why entries could not be checked at all (a wrong-shaped answer,
            a ``bundle_url`` that could not be fetched or decoded).
    """

    provenance: list[dict[str, Any]]
    other_kinds: list[str]
    problems: list[str]


def read_listing(answer: object, repo: str) -> Listing:
    """Sort the attestations ``answer`` of ``repo`` (``[]``: none published). Pure."""
    answer, failures = _unwrap(answer)
    problems = list(failures)
    bundles: list[dict[str, Any]] = []
    if isinstance(answer, dict) and "attestations" in answer:
        listed = answer["attestations"]
        if not isinstance(listed, list):
            listed = []
            problems.append(f"{repo}'s attestations answer holds no list of attestations")
        bundles = parse_attestations(listed)
        by_url = sum(1 for e in listed if isinstance(e, dict) and _unfetched(e))
        neither = len(listed) - len(bundles) - by_url
        if by_url:
            problems.append(f"{repo} lists {by_url} attestation(s) by bundle_url that were not fetched")
        if neither:
            problems.append(f"{repo} lists {neither} attestation(s) with neither a bundle nor a bundle_url")
    elif answer != []:
        bundles = parse_attestations(answer)  # a bundle or bundles, as a hand-made mirror file may hold
        if not bundles:
            problems.append(f"{repo}'s attestations answer is not a list of attestations")
    # Set aside by their unsigned claim: whoever could change that claim could as well drop the
    # entry, so this gives nothing away; a bundle whose claim cannot be read is verified (and fails).
    kinds = [(bundle, predicate_type(bundle)) for bundle in bundles]
    return Listing(
        provenance=[b for b, kind in kinds if kind is None or kind.startswith(_SLSA_PROVENANCE_PREFIX)],
        other_kinds=[kind for _b, kind in kinds if kind is not None and not kind.startswith(_SLSA_PROVENANCE_PREFIX)],
        problems=problems,
    )


def _unfetched(entry: dict[str, Any]) -> bool:
    return not isinstance(entry.get("bundle"), dict) and isinstance(entry.get("bundle_url"), str)


#: A bundle file is a few kB per attestation; anything far larger is not one.
_MAX_ATTESTATION_FILE_BYTES: Final = 16 * 1024 * 1024


def read_attestation_file(path: Path) -> list[dict[str, Any]]:
    """The Sigstore bundles in ``path`` (``install-file --bundle``): JSON or JSON lines.

    Raises:
        UserInputError: Unreadable, too large, or holding no Sigstore bundle.
    """
    from llama_runtime.runtime.errors import UserInputError
    from llama_runtime.runtime.fsutil import parse_record, read_regular

    try:
        raw = read_regular(path, _MAX_ATTESTATION_FILE_BYTES + 1)  # a FIFO is refused, never waited on
    except OSError as exc:
        raise UserInputError(f"Cannot read the attestation bundle {path}: {exc.strerror or exc}.") from None
    bundles: list[dict[str, Any]] = []
    if len(raw) <= _MAX_ATTESTATION_FILE_BYTES:
        what = f"the attestation bundle {path}"
        try:
            bundles = parse_attestations(parse_record(raw, what=what))
        except ValueError:  # JSON lines, as `gh attestation download` writes them
            try:
                bundles = parse_attestations(
                    [parse_record(line, what=what) for line in raw.splitlines() if line.strip()]
                )
            except ValueError:
                bundles = []
    if not bundles:
        raise UserInputError(
            f"{path} holds no Sigstore bundle; give a .sigstore.json bundle, the JSON lines "
            "`gh attestation download` writes, or the attestations API's answer."
        )
    return bundles


# -- the per-runtime result -------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    """The provenance result recorded in a runtime's marker.

    Attributes:
        status: ``verified``, ``absent`` (none published) or ``unverified`` (not checked).
        reason: Why, for ``absent`` and ``unverified``; the trust root for ``verified``.
        signer: Who signed it, when verified.
        bundle: The verified Sigstore bundle, kept so an export can be re-verified offline.
        build_commit: The commit the release was created at (its ``target_commitish``,
            when that is a full commit hash). Not the signer's commit: under
            ``workflow_run`` the certificate names the publisher's.
    """

    status: Status
    reason: str = ""
    signer: Signer | None = None
    bundle: dict[str, Any] | None = field(default=None, compare=False)
    build_commit: str | None = None

    def to_marker(self) -> dict[str, Any]:
        """The marker's ``provenance`` object (with the bundle)."""
        payload = self.summary()
        if self.bundle is not None:
            payload["bundle"] = self.bundle
        return payload

    def summary(self) -> dict[str, Any]:
        """The contract's ``provenance`` object of a runtime: status, reason, signer (no bundle)."""
        payload: dict[str, Any] = {"status": self.status, "reason": self.reason or None}
        if self.signer is not None:
            payload.update(self.signer.to_json())
        if self.build_commit is not None:
            payload["build_commit"] = self.build_commit
            payload["build_commit_from"] = "release"
        return payload


#: A full git commit hash as GitHub spells it (``target_commitish`` may also be a branch name).
_COMMIT_SHA: Final = re.compile(r"^[0-9a-f]{40}$")


def with_build_commit(result: Provenance, target_commitish: str | None) -> Provenance:
    """``result`` with the build's commit, when the release's ``target_commitish`` is a commit hash.

    A branch name (``master``) says where the branch was when the release was
    made, not what was built: it is left out, and the binary's ``--version``
    names the commit instead (:func:`~runtime.marker.provenance_summary`).
    """
    if target_commitish is None or not _COMMIT_SHA.match(target_commitish.lower()):
        return result
    return replace(result, build_commit=target_commitish.lower())


def verified(signer: Signer, bundle: dict[str, Any], trust_root: str, note: str = "") -> Provenance:
    """A verified result for ``signer``; ``note`` says how the policy judged what it could not know."""
    reason = f"verified against {trust_root}" + (f"; {note}" if note else "")
    return Provenance("verified", reason, signer, bundle)


# -- the check, wired to the cryptography -----------------------------------------------


def combine(results: Sequence[tuple[str, Provenance]]) -> Provenance:
    """One runtime's provenance from its assets' (main first): verified only if all are."""
    for status in ("unverified", "absent"):
        for name, result in results:
            if result.status == status:
                return result if name == results[0][0] else Provenance(status, f"{name}: {result.reason}")
    return results[0][1]


def record_each_provenance(
    facts: InstallFacts, results: Sequence[tuple[str, Provenance]], *, keep: Collection[str] = ()
) -> InstallFacts:
    """``facts`` with each companion archive's own result (with its bundle) in its ``extra_assets`` entry.

    What an entry said before is replaced, not merged: an entry's provenance is
    only ever what was checked here against these bytes, never what an
    (unsigned) marker from elsewhere claimed. ``keep`` names entries whose
    record comes from this home's own verified install (a reused companion).
    """
    judged = dict(results)
    entries = [dict(e) for e in facts.extra_assets]
    for entry in entries:
        result = judged.get(str(entry.get("name", "")))
        if result is not None:
            entry["provenance"] = result.to_marker()
        elif entry.get("name") not in keep:
            entry.pop("provenance", None)
    return replace(facts, extra_assets=tuple(entries))


@dataclass(frozen=True)
class ProvenanceCheck:
    """How this invocation checks provenance.

    Attributes:
        require: Refuse (exit 8) anything that is not ``verified``.
        workflow: The deprecated bare ``LLAMA_RUNTIME_PROVENANCE_WORKFLOW`` value: a pin
            for every repository except upstream's (:data:`UPSTREAM_REPOS`).
        trusted_root: A Sigstore ``trusted_root.json`` to use instead of the production one.
        offline: Never refresh the trust root over the network (install-file, file:// mirrors).
        workflows: Opt-in pins, casefolded ``owner/name`` -> the one signing workflow's path.
        signers: Opt-in reusable workflows, casefolded ``owner/name`` -> ``owner/name/.github/workflows/x.yml``.
        default_branches: What the source said each repository's default branch is
            (casefolded ``owner/name``); a repository not here has an unknown one.
    """

    require: bool = False
    workflow: str | None = None
    trusted_root: Path | None = None
    offline: bool = False
    workflows: Mapping[str, str] = field(default_factory=dict)
    signers: Mapping[str, str] = field(default_factory=dict)
    default_branches: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls, settings: ProvenanceSettings, *, require: bool = False, offline: bool = False
    ) -> ProvenanceCheck:
        """The check the invocation's settings ask for; ``require`` and ``offline`` add to them."""
        return cls(
            require=require,
            workflow=settings.workflow,
            trusted_root=settings.trusted_root,
            offline=offline or settings.offline,
            workflows=settings.workflows,
            signers=settings.signers,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, require: bool = False, offline: bool = False) -> ProvenanceCheck:
        """The check ``env`` asks for (the variables :class:`~updater.config.ProvenanceSettings` reads).

        ``LLAMA_RUNTIME_REQUIRE_PROVENANCE=1`` requires it too; ``require`` is the
        ``--require-provenance`` flag. Production code builds the check from the
        invocation's settings instead (:meth:`from_settings`): the environment is read once.

        Raises:
            UserInputError: A value is not of its documented form (exit 2).
        """
        return cls.from_settings(
            ProvenanceSettings.from_env(env),
            require=require or env_flag(env, "LLAMA_RUNTIME_REQUIRE_PROVENANCE"),
            offline=offline,
        )

    def knowing_default_branch(self, repo: str, branch: str | None) -> ProvenanceCheck:
        """This check, told that ``repo``'s default branch is ``branch`` (``None``: still unknown)."""
        if not branch:
            return self
        return replace(self, default_branches={**self.default_branches, repo.casefold(): branch})

    def policy_for(self, repo: str) -> SignerPolicy:
        """The signer policy for assets installed from ``repo``.

        A per-repository pin wins; the bare (deprecated) pin applies to forks
        only and never narrows or widens upstream's policy.
        """
        for warning in self.warnings_for(repo):
            log.warning("provenance configuration", warning=warning)
        key = repo.casefold()
        workflow = self.workflows.get(key)
        if workflow is None and self.workflow and key not in UPSTREAM_REPOS:
            workflow = self.workflow
        return SignerPolicy(
            repository=repo,
            # Upstream's is a known fact, whatever a source said.
            default_branch=trusted_default_branch(repo, self.default_branches.get(key)),
            workflow=workflow,
            signer=self.signers.get(key),
        )

    def warnings_for(self, repo: str) -> list[str]:
        """What an install from ``repo`` must warn about this configuration (the deprecated bare pin)."""
        if not self.workflow:
            return []
        name = "LLAMA_RUNTIME_PROVENANCE_WORKFLOW"
        if repo.casefold() in UPSTREAM_REPOS:
            return [
                f"{name}={self.workflow} (no repository named) is ignored for {repo}: upstream's builds are "
                f"accepted from any of its workflows on its default branch or a tag; pin one with "
                f"{name}={repo}=.github/workflows/FILE.yml."
            ]
        if repo.casefold() in self.workflows:
            return []
        return [
            f"{name}={self.workflow} without a repository is deprecated; write {name}={repo}={self.workflow} "
            "(it pins the workflow for that repository only)."
        ]

    def not_checked(self, asset: str, reason: str) -> Provenance:
        """``unverified`` with ``reason``, or the exit-8 refusal when provenance is required."""
        if self.require:
            raise ProvenanceMissingError(
                f"{asset}: provenance could not be checked ({reason}) and --require-provenance was given; "
                "nothing was activated."
            )
        return Provenance("unverified", reason)

    def evaluate_answer(self, asset: str, sha256: str, repo: str, answer: object) -> Provenance:
        """:meth:`evaluate` for an attestations answer (:meth:`BuildSource.attestations`).

        Only SLSA provenance decides: other kinds listed for the digest are set
        aside (they neither verify nor fail the file). An answer that lists
        entries that could not be checked (the wrong shape, a ``bundle_url``
        that could not be fetched) and no provenance bundle is ``unverified``
        with the reason, never ``absent``.

        Raises:
            ProvenanceError, ProvenanceMissingError: As :meth:`evaluate`.
        """
        listing = read_listing(answer, repo)
        if listing.provenance:
            return self.evaluate(asset, sha256, repo, listing.provenance)
        if listing.problems:
            return self.not_checked(asset, "; ".join(listing.problems))
        result = self.evaluate(asset, sha256, repo, [])
        if listing.other_kinds:
            ignored = ", ".join(dict.fromkeys(listing.other_kinds))
            result = replace(result, reason=f"{result.reason} (only attestations of another kind: {ignored})")
        return result

    def evaluate(self, asset: str, sha256: str, repo: str, bundles: Sequence[dict[str, Any]]) -> Provenance:
        """The provenance of the file ``asset`` (``sha256``) from ``repo``, given its published bundles.

        Raises:
            ProvenanceError: Bundles are published and none verifies (always).
            ProvenanceMissingError: None is published, or none could be checked,
                and provenance is required.
        """
        if not bundles:
            if self.require:
                raise ProvenanceMissingError(
                    f"{asset} has no build attestation in {repo} and --require-provenance was given; "
                    "nothing was activated.",
                    hint="Install a release that publishes attestations, or drop --require-provenance.",
                )
            return Provenance("absent", f"{repo} publishes no build attestation for {asset}")
        from llama_runtime.updater.verify import signer as attestation

        policy = self.policy_for(repo)
        try:
            trust = attestation.load_trust_root(self.trusted_root, offline=self.offline)
        except attestation.SigstoreMissingError as exc:
            return self.not_checked(asset, exc.message)
        failures: list[str] = []
        for bundle in bundles:
            try:
                signer = attestation.verify_bundle(bundle, sha256, policy, trust)
            except ProvenanceError as exc:
                failures.append(exc.message)
                continue
            return verified(signer, bundle, trust.description, policy.note())
        count = f"{len(bundles)} attestations" if len(bundles) > 1 else "its attestation"
        raise ProvenanceError(
            f"{asset}: {count} failed verification ({'; '.join(dict.fromkeys(failures))}), checked against "
            f"{trust.description}; nothing was activated.",
            hint=trust.hint,
        )
