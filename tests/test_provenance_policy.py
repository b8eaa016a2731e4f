"""The signer policy for upstream's real identities, on certificates minted by a test CA.

Each certificate (tests/fulcio_certs.py) carries the Fulcio extensions a
GitHub Actions certificate of that identity carries; it goes through
:func:`attestation.signer_of`, the code that reads a real bundle's certificate,
and then the policy :class:`ProvenanceCheck` builds from the environment. No
network, no Sigstore trust: the cryptographic path is proved on the real
staging bundle (tests/test_provenance.py, tests/test_provenance_e2e.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llama_runtime import InstalledRuntime, UserInputError
from llama_runtime.runtime.marker import InstallMarker, provenance_summary
from llama_runtime.updater.cli.common import provenance_line
from llama_runtime.updater.sources.github import GitHubClient, JsonFileEtagCache
from llama_runtime.updater.sources.mirror_reader import FileTransport, file_api_url
from llama_runtime.updater.verify.provenance import ProvenanceCheck, verified, with_build_commit
from llama_runtime.updater.verify.signer import Signer, policy_violation, signer_of
from tests.fakegithub import FakeGitHub, Fault
from tests.fulcio_certs import PUBLISH_ERA, RELEASE_ERA, UPSTREAM, FulcioIdentity, mint

FORK = "someone/llama.cpp"
WORKFLOW_ENV = "LLAMA_RUNTIME_PROVENANCE_WORKFLOW"
SIGNER_ENV = "LLAMA_RUNTIME_PROVENANCE_SIGNER"
#: A reusable workflow of another repository that signs for the caller (its Build Signer URI names it).
SHARED = "acme/attest-tools"
REUSABLE = PUBLISH_ERA.but(
    signer_repository=SHARED, workflow=".github/workflows/attest.yml", workflow_ref="refs/tags/v1"
)


def signer(identity: FulcioIdentity) -> Signer:
    """The signer as the verifier reads it from a certificate of ``identity``."""
    return signer_of(mint(identity))


def violation(
    identity: FulcioIdentity, env: dict[str, str] | None = None, *, branch: str | None = "master"
) -> str | None:
    """Why the policy for ``identity.repository`` (configured by ``env``) refuses ``identity``, or ``None``."""
    check = ProvenanceCheck.from_env(env or {}).knowing_default_branch(identity.repository, branch)
    return policy_violation(signer(identity), check.policy_for(identity.repository))


# -- what the certificate says ------------------------------------------------------------


@pytest.mark.parametrize(
    "era", [RELEASE_ERA, PUBLISH_ERA], ids=["release.yml-push", "release-publish.yml-workflow_run"]
)
def test_minted_certificate_reads_back_as_the_identity_it_carries(era: FulcioIdentity) -> None:
    """Proves the minted certificates are read by the production reader as upstream's identities."""
    read = signer(era)
    assert (read.repository, read.workflow, read.source_ref, read.trigger) == (
        UPSTREAM,
        era.workflow,
        "refs/heads/master",
        era.trigger,
    )
    assert read.commit == era.commit and read.build_signer_uri == era.build_signer_uri
    assert read.to_json()["signer_commit"] == era.commit


# -- the default: the repository, its default branch or a tag, any of its workflows ------


@pytest.mark.parametrize(
    "era", [RELEASE_ERA, PUBLISH_ERA], ids=["release.yml-push", "release-publish.yml-workflow_run"]
)
def test_both_upstream_signing_eras_are_accepted_by_default(era: FulcioIdentity) -> None:
    """Proves: the release.yml (push) and release-publish.yml (workflow_run) identities both pass."""
    assert violation(era) is None


def test_upstream_identity_is_refused_for_another_repository() -> None:
    """Proves: a certificate from ggml-org/llama.cpp does not vouch for a fork's asset, nor the reverse."""
    check = ProvenanceCheck().knowing_default_branch(FORK, "master")
    assert policy_violation(signer(PUBLISH_ERA), check.policy_for(FORK)) == f"built in {UPSTREAM}, not in {FORK}"
    fork_cert = signer(PUBLISH_ERA.but(repository=FORK))
    assert policy_violation(fork_cert, ProvenanceCheck().policy_for(UPSTREAM)) == f"built in {FORK}, not in {UPSTREAM}"


def test_repository_compares_case_folded() -> None:
    """Proves: GitHub's case-insensitive names do not refuse a genuine signer."""
    assert violation(PUBLISH_ERA.but(repository="GGML-org/Llama.cpp", signer_repository="ggml-org/LLAMA.cpp")) is None


@pytest.mark.parametrize("ref", ["refs/heads/feature", "refs/pull/1/merge", "refs/heads/main", "", "refs/tags/"])
def test_a_build_from_another_ref_is_refused_naming_the_ref_and_what_counts(ref: str) -> None:
    """Proves: a feature branch, a pull request's merge ref, another branch (or none) is not a release."""
    refused = violation(PUBLISH_ERA.but(source_ref=ref, workflow_ref=ref or "refs/heads/x"))
    assert refused is not None
    assert f"built from the ref {ref or '(none named)'}, not from refs/heads/master or a tag" in refused


def test_a_build_from_a_tag_is_accepted() -> None:
    """Proves: a workflow run for a tag (refs/tags/…) counts, whatever the default branch."""
    tagged = RELEASE_ERA.but(
        source_ref="refs/tags/b11424", workflow_ref="refs/tags/b11424", trigger="workflow_dispatch"
    )
    assert violation(tagged) is None
    assert violation(tagged, branch=None) is None


def test_another_issuer_is_refused() -> None:
    """Proves: only GitHub Actions' OIDC issuer counts."""
    refused = violation(PUBLISH_ERA.but(issuer="https://accounts.google.com"))
    assert refused is not None and "from https://accounts.google.com" in refused


# -- the default branch ---------------------------------------------------------------


def test_unknown_default_branch_of_a_fork_accepts_master_and_main_and_says_so() -> None:
    """Proves: offline, or told only by a mirror, master and main both count for a fork and the result says so."""
    fork = PUBLISH_ERA.but(repository=FORK)
    assert violation(fork, branch=None) is None
    assert violation(fork.but(source_ref="refs/heads/main"), branch=None) is None
    refused = violation(fork.but(source_ref="refs/heads/dev"), branch=None)
    assert refused is not None and "(default branch unknown: accepted refs/heads/master or main)" in refused
    policy = ProvenanceCheck().policy_for(FORK)
    result = verified(signer(fork), {}, "the test root", policy.note())
    assert result.reason == "verified against the test root; default branch unknown: accepted refs/heads/master or main"


def test_known_default_branch_refuses_the_other_common_one() -> None:
    """Proves: once GitHub says a fork's default branch is master, a build from main is not its release."""
    fork = PUBLISH_ERA.but(repository=FORK)
    refused = violation(fork.but(source_ref="refs/heads/main"), branch="master")
    assert refused is not None and "default branch unknown" not in refused
    assert violation(fork.but(source_ref="refs/heads/trunk"), branch="trunk") is None


@pytest.mark.parametrize("said", [None, "main", "experimental"])
def test_upstreams_default_branch_is_master_whatever_a_source_says(said: str | None) -> None:
    """Proves: upstream's default branch is a known fact, never widened (nor left unknown) by an answer."""
    assert violation(PUBLISH_ERA, branch=said) is None
    for other in ("main", "experimental"):
        refused = violation(PUBLISH_ERA.but(source_ref=f"refs/heads/{other}"), branch=said)
        assert refused is not None and "not from refs/heads/master or a tag" in refused
    assert ProvenanceCheck().knowing_default_branch(UPSTREAM, said).policy_for(UPSTREAM).note() == ""


# -- opt-ins per repository -----------------------------------------------------------


def test_a_workflow_pin_refuses_the_other_workflow_for_that_repository_only() -> None:
    """Proves: pinning release.yml for upstream refuses release-publish.yml there, and nowhere else."""
    env = {WORKFLOW_ENV: f"{UPSTREAM}=.github/workflows/release.yml"}
    refused = violation(PUBLISH_ERA, env)
    assert refused == (
        "signed by the workflow .github/workflows/release-publish.yml, not by "
        f"{UPSTREAM}'s .github/workflows/release.yml"
    )
    assert violation(RELEASE_ERA, env) is None
    fork = PUBLISH_ERA.but(repository=FORK)
    assert violation(fork, env) is None  # the pin is upstream's, not the fork's


def test_pins_for_several_repositories_are_a_comma_separated_list() -> None:
    """Proves: each pair pins its own repository (names case-folded)."""
    env = {WORKFLOW_ENV: f" {UPSTREAM.upper()}=.github/workflows/release-publish.yml , {FORK}=.github/workflows/b.yaml"}
    assert violation(PUBLISH_ERA, env) is None
    assert violation(RELEASE_ERA, env) is not None
    assert violation(PUBLISH_ERA.but(repository=FORK, workflow=".github/workflows/b.yaml"), env) is None


def test_a_reusable_workflow_signs_only_when_opted_in_for_that_repository() -> None:
    """Proves: a Build Signer URI in another repository is refused unless LLAMA_RUNTIME_PROVENANCE_SIGNER names it."""
    refused = violation(REUSABLE)
    assert refused is not None and "of another repository" in refused and f"{SIGNER_ENV}={UPSTREAM}=" in refused
    opt_in = {SIGNER_ENV: f"{UPSTREAM}={SHARED}/.github/workflows/attest.yml"}
    assert violation(REUSABLE, opt_in) is None
    other = {SIGNER_ENV: f"{FORK}={SHARED}/.github/workflows/attest.yml"}
    assert violation(REUSABLE, other) is not None  # an opt-in for another repository widens nothing here
    wrong = {SIGNER_ENV: f"{UPSTREAM}={SHARED}/.github/workflows/other.yml"}
    assert violation(REUSABLE, wrong) is not None
    assert violation(REUSABLE.but(source_ref="refs/heads/feature"), opt_in) is not None  # the ref rule still holds


def test_bare_workflow_value_is_ignored_for_upstream_with_a_warning() -> None:
    """Proves: the deprecated bare value never narrows (or widens) ggml-org/llama.cpp, and says so."""
    env = {WORKFLOW_ENV: ".github/workflows/release.yml"}
    assert violation(PUBLISH_ERA, env) is None  # not narrowed to release.yml
    assert violation(REUSABLE.but(workflow=".github/workflows/release.yml"), env) is not None  # not widened
    for repo in (UPSTREAM, "ggerganov/llama.cpp", "GGML-ORG/llama.cpp"):
        [warning] = ProvenanceCheck.from_env(env).warnings_for(repo)
        assert "is ignored for" in warning and f"{WORKFLOW_ENV}={repo}=.github/workflows/FILE.yml" in warning


def test_bare_workflow_value_still_pins_a_fork_with_a_deprecation_warning() -> None:
    """Proves: today's bare value keeps working for other repositories, and tells how to write it now."""
    env = {WORKFLOW_ENV: ".github/workflows/release.yml"}
    fork_publish = PUBLISH_ERA.but(repository=FORK)
    assert violation(fork_publish, env) is not None
    assert violation(RELEASE_ERA.but(repository=FORK), env) is None
    [warning] = ProvenanceCheck.from_env(env).warnings_for(FORK)
    assert "deprecated" in warning and f"{WORKFLOW_ENV}={FORK}=.github/workflows/release.yml" in warning
    explicit = {WORKFLOW_ENV: f".github/workflows/release.yml,{FORK}=.github/workflows/release-publish.yml"}
    assert violation(fork_publish, explicit) is None  # the fork's own pin wins over the bare one
    assert ProvenanceCheck.from_env({}).warnings_for(FORK) == []


@pytest.mark.parametrize(
    ("name", "value", "form"),
    [
        (WORKFLOW_ENV, "release.yml", "OWNER/NAME=.github/workflows/FILE.yml"),
        (WORKFLOW_ENV, f"{UPSTREAM}=release.yml", "OWNER/NAME=.github/workflows/FILE.yml"),
        (WORKFLOW_ENV, "ggml-org=.github/workflows/x.yml", "OWNER/NAME=.github/workflows/FILE.yml"),
        (WORKFLOW_ENV, f"{UPSTREAM}=.github/workflows/x.yml@refs/heads/master", "OWNER/NAME="),
        (WORKFLOW_ENV, f"{UPSTREAM}=.github/workflows/a.yml,{UPSTREAM}=.github/workflows/b.yml", "twice"),
        (WORKFLOW_ENV, ".github/workflows/a.yml,.github/workflows/b.yml", "OWNER/NAME="),
        (WORKFLOW_ENV, "../x/.github/workflows/a.yml", "OWNER/NAME="),
        (SIGNER_ENV, f"{UPSTREAM}=.github/workflows/x.yml", "SIGNER-OWNER/SIGNER-NAME/.github/workflows/FILE.yml"),
        (SIGNER_ENV, f"{SHARED}/.github/workflows/x.yml", "OWNER/NAME=SIGNER-OWNER"),
        (SIGNER_ENV, f"{UPSTREAM}=a/b/.github/workflows/x.yml,{UPSTREAM}=c/d/.github/workflows/x.yml", "twice"),
    ],
)
def test_malformed_opt_ins_are_bad_input_naming_the_valid_form(name: str, value: str, form: str) -> None:
    """Proves: a value the policy cannot read is exit 2 saying what is valid, never a silently wider policy."""
    with pytest.raises(UserInputError) as caught:
        ProvenanceCheck.from_env({name: value})
    assert caught.value.exit_code == 2
    assert form in caught.value.message and name in caught.value.message


# -- where the default branch comes from ------------------------------------------------


def test_client_reads_the_default_branch_with_its_etag_and_tolerates_its_absence(
    github: FakeGitHub, tmp_path: Path
) -> None:
    """Proves: GET /repos/{owner}/{repo} gives the branch, a repeat is a 304, and failures mean unknown."""
    github.add_release(UPSTREAM, "b7000", {"x.txt": b"x"})
    github.add_release(FORK, "b7000", {"x.txt": b"x"})
    github.set_default_branch(FORK, "develop")
    cache = JsonFileEtagCache(tmp_path / "etags.json")
    with GitHubClient(github.api_url, UPSTREAM, etag_cache=cache) as client:
        assert client.repository().trusted_default_branch == "master"
        assert client.repository().trusted_default_branch == "master"
    assert [r.status for r in github.requests_to("api", f"/api/repos/{UPSTREAM}") if r.path.endswith(".cpp")] == [
        200,
        304,
    ]
    with GitHubClient(github.api_url, FORK) as client:
        assert client.repository().trusted_default_branch == "develop"
    with GitHubClient(github.api_url, "nobody/nothing") as client:
        assert client.repository().trusted_default_branch is None  # 404
    github.inject(f"/api/repos/{FORK}", Fault(status=500, times=None))
    with GitHubClient(github.api_url, FORK, attempts=1, sleep=lambda _: None) as client:
        assert client.repository().trusted_default_branch is None


def test_mirror_stores_the_default_branch_but_its_clients_do_not_key_trust_on_it(
    github: FakeGitHub, tmp_path: Path
) -> None:
    """Proves: a file:// mirror stores GET /repos/{owner}/{repo} on a sync; read back, it is still unknown."""
    from llama_runtime.updater.offline.mirror import mirror_repository
    from llama_runtime.updater.sources.mirror_reader import mirror_paths

    dest = tmp_path / "mirror"
    url, root = file_api_url(dest.as_uri())
    with GitHubClient(url, UPSTREAM, transport=FileTransport(root)) as client:
        assert client.repository().trusted_default_branch is None  # nothing mirrored yet
    github.add_release(UPSTREAM, "b7000", {"x.txt": b"x"})
    paths = mirror_paths(dest, UPSTREAM)
    with GitHubClient(github.api_url, UPSTREAM) as upstream:
        assert mirror_repository(upstream, paths) == "master"
    assert json.loads(paths.repository_json.read_text())["default_branch"] == "master"
    with GitHubClient(url, UPSTREAM, transport=FileTransport(root)) as client:
        assert (
            client.repository().trusted_default_branch is None
        )  # what a mirror says about itself: unknown to the policy


# -- what status says: only what the certificate proves ---------------------------------


def runtime_with(provenance: dict[str, object], version: str) -> InstalledRuntime:
    marker = InstallMarker(
        UPSTREAM, "b11424", "cpu", "cpu", "a", 1, "0" * 64, True, "t", "llama-server", version=version
    )
    return InstalledRuntime("r", Path("/r"), dataclasses.replace(marker, provenance=provenance))


def test_status_names_the_signing_workflow_trigger_and_signer_commit_never_built_at_it() -> None:
    """Proves: under workflow_run the certificate's commit is shown as the signer's, the build's from the release."""
    signed = verified(signer(PUBLISH_ERA), {}, "the test root")
    recorded = with_build_commit(signed, "6C59C40" + "1" * 33).to_marker()
    line = provenance_line(runtime_with(recorded, "version: 0.5.0-dev (build 11424, commit 6c59c40)"))
    assert line == (
        f"provenance: verified, signed by {UPSTREAM} .github/workflows/release-publish.yml (trigger workflow_run, "
        f"ref refs/heads/master), signer commit c06f84100000 ({PUBLISH_ERA.extensions()[21]}); "
        "build commit 6c59c4011111 (from the release)"
    )
    assert "built" not in line.replace("build commit", "")
    summary = provenance_summary(runtime_with(recorded, "").marker)
    assert summary["signer_commit"] == PUBLISH_ERA.commit and summary["trigger"] == "workflow_run"
    assert (summary["build_commit"], summary["build_commit_from"]) == ("6c59c40" + "1" * 33, "release")


def test_build_commit_falls_back_to_the_binary_when_the_release_names_a_branch() -> None:
    """Proves: a target_commitish that is a branch name is not a commit; the binary's --version is used."""
    recorded = with_build_commit(verified(signer(RELEASE_ERA), {}, "r"), "master").to_marker()
    assert "build_commit" not in recorded
    summary = provenance_summary(runtime_with(recorded, "version: 0.5.0-dev (build 11222, commit 4f1a2b3)").marker)
    assert (summary["build_commit"], summary["build_commit_from"]) == ("4f1a2b3", "binary")
    line = provenance_line(runtime_with({"status": "absent", "reason": "none"}, "version: 7000 (abcdef1)"))
    assert line == "provenance: absent (none); build commit abcdef1 (from the binary's --version)"


# -- attack pass of this round ----------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["refs/tags/../heads/evil", "refs/tags/ ", "refs/tags/\n", "refs/tags/a..b", "refs/tags/x.lock"]
)
def test_a_tag_ref_git_could_not_name_is_refused(ref: str) -> None:
    """Proves: only a well-formed tag name counts as a tag (``refs/tags/../heads/evil`` is no tag)."""
    assert violation(PUBLISH_ERA.but(source_ref=ref, workflow_ref=ref)) is not None


def test_a_well_formed_tag_ref_is_accepted() -> None:
    assert violation(PUBLISH_ERA.but(source_ref="refs/tags/b11429", workflow_ref="refs/tags/b11429")) is None


def test_builds_installed_through_the_old_upstream_name_are_verified_by_the_new_ones_certificate() -> None:
    """Proves: ggerganov/llama.cpp (renamed to ggml-org, still redirected) accepts ggml-org's signatures."""
    check = ProvenanceCheck().knowing_default_branch("ggerganov/llama.cpp", "master")
    assert policy_violation(signer(PUBLISH_ERA), check.policy_for("ggerganov/llama.cpp")) is None
    assert policy_violation(signer(PUBLISH_ERA), check.policy_for(FORK)) is not None


@pytest.mark.parametrize("branch", ["@", "a@{b", "HEAD", "a//b", ".hidden", "refs/heads/x", "x.lock", "a b"])
def test_a_default_branch_answer_git_could_not_name_is_unknown(github: FakeGitHub, branch: str) -> None:
    """Proves: a hostile repository answer cannot name a branch git would refuse; master/main apply instead."""
    github.add_release(UPSTREAM, "b1", {"x": b"x"})
    github.set_default_branch(UPSTREAM, branch)
    with GitHubClient(github.api_url, UPSTREAM) as client:
        assert client.repository().trusted_default_branch is None
